"""TLS and credentials on the client side: the SSL context of an ``https://`` or
``grpcs://`` URL, and the ``Authorization`` value of a bearer token.

A context made here verifies the server's certificate and host name against the
system's CAs, or against ``cafile`` alone (a private or self-signed CA); with
``certfile`` it presents a client certificate (mutual TLS).  It offers the ALPN
protocol of its binding: ``http/1.1`` for HTTP, ``h2`` for gRPC (HTTP/2 over TLS
needs ALPN, RFC 9113 section 3.2; gRPC servers refuse a handshake without it).
"""

from __future__ import annotations

import re
import ssl

__all__ = ["authorization", "client_context", "tls_reason"]


def client_context(
    *,
    cafile: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    alpn: str,
) -> ssl.SSLContext:
    """A client context that verifies the server (see the module doc).

    Raises ValueError naming the file that cannot be used.
    """
    if keyfile is not None and certfile is None:
        raise ValueError("keyfile needs a certfile (the client certificate)")
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise ValueError(f"cannot use the CA file {cafile}: {_reason(exc)}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if certfile is not None:
        try:
            context.load_cert_chain(certfile, keyfile)
        except (OSError, ValueError) as exc:
            files = certfile if keyfile is None else f"{certfile} and {keyfile}"
            raise ValueError(f"cannot use the client certificate {files}: {_reason(exc)}") from None
    context.set_alpn_protocols([alpn])
    return context


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return tls_reason(exc)
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


_OPENSSL_NOISE = re.compile(r"^\[SSL(?:: [A-Z0-9_]+)?\] ?| \(_ssl\.c:\d+\)$")


def tls_reason(exc: ssl.SSLError) -> str:
    """What went wrong in a handshake, as a person reads it: ``TLS: certificate
    verify failed: self-signed certificate`` (its ``errno`` is OpenSSL's, not the
    system's: ``os.strerror`` of it would mislead)."""
    text = _OPENSSL_NOISE.sub("", exc.strerror or str(exc) or "").strip()
    return f"TLS: {text or exc.reason or type(exc).__name__}"


def authorization(token: str | None) -> str | None:
    """The ``Authorization`` value of a bearer token (None: no token).

    Raises ValueError (without quoting the token) unless it is visible ASCII, the
    only characters a header or gRPC metadata value can carry as they are
    (RFC 6750's ``b64token`` is a subset).
    """
    if token is None:
        return None
    if not token or not all("\x21" <= ch <= "\x7e" for ch in token):
        raise ValueError(
            "the token must be non-empty visible ASCII (no spaces, line breaks or other "
            "characters a header cannot carry)"
        )
    return f"Bearer {token}"

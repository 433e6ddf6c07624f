"""A throw-away OAuth issuer on 127.0.0.1 for the tests: metadata, a JWKS, and tokens.

::

    with LocalIssuer() as issuer:           # or the ``issuer`` fixture
        verifier = OAuthVerifier(issuer.url, AUDIENCE)
        await verifier.start()
        token = issuer.mint(scope="tools:read")      # RS256, kid "rsa-1", sub "alice"
        issuer.mint(kid="ec-1")                      # ES256 with the EC key
        issuer.mint(sub=None)                        # None leaves a claim out
        issuer.mint(alg="HS256", key=b"secret")      # anything, signed as asked
        kid = issuer.rotate()                        # a new RSA key, served from now on

It serves RFC 8414 metadata at ``/.well-known/oauth-authorization-server`` and the
key set at :attr:`LocalIssuer.jwks_uri`; :attr:`~LocalIssuer.jwks_fetches`
counts the key-set requests.  Clearing :attr:`~LocalIssuer.gate` holds key-set
answers until it is set again (bounded by ``WAIT``), and
:attr:`~LocalIssuer.jwks_requested` is set when a key-set request arrives.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm, get_default_algorithms

AUDIENCE = "https://tools.example/mcp"
WAIT = 10.0  # the longest a held key-set answer waits for the gate
METADATA_PATH = "/.well-known/oauth-authorization-server"
JWKS_PATH = "/jwks.json"

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def new_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def new_ec_key(curve: ec.EllipticCurve | None = None) -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(curve or ec.SECP256R1())


def public_jwk(key: PrivateKey, kid: str) -> dict[str, Any]:
    """The public half of ``key`` as a JWK with ``kid`` and ``use: sig``."""
    if isinstance(key, rsa.RSAPrivateKey):
        jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    else:
        jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "use": "sig"}


class LocalIssuer:
    """An authorization server's public face, on an ephemeral 127.0.0.1 port.

    ``path`` gives the issuer identifier a path (``http://127.0.0.1:PORT/path``;
    its metadata then lives at ``/.well-known/oauth-authorization-server/path``
    as RFC 8414 says).  ``clock`` is the time source of :meth:`mint`'s default
    ``iat`` and ``exp``.  ``ssl_context`` (a server context) serves https
    instead of http.  Starts serving on construction; :meth:`close` (or
    leaving the ``with`` block) stops it.
    """

    def __init__(
        self,
        *,
        path: str = "",
        audience: str = AUDIENCE,
        clock: Callable[[], float] = time.time,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.audience = audience
        self.clock = clock
        #: Private keys by kid; every one of them is in the served key set.
        self.keys: dict[str, PrivateKey] = {"rsa-1": new_rsa_key(), "ec-1": new_ec_key()}
        self.jwks_fetches = 0
        self.metadata_fetches = 0
        self.gate = threading.Event()
        self.gate.set()
        self.jwks_requested = threading.Event()
        #: An ``alg`` to publish in a key's JWK, by kid (none published otherwise).
        self.jwk_algs: dict[str, str] = {}
        #: Replaces the served metadata when set (a test of a misconfigured issuer).
        self.metadata_override: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        if ssl_context is not None:
            self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
        scheme = "http" if ssl_context is None else "https"
        self.origin = f"{scheme}://127.0.0.1:{self.port}"
        self.url = self.origin + path
        self.jwks_uri = self.origin + JWKS_PATH
        self.metadata_url = self.origin + METADATA_PATH + path
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.gate.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(WAIT)

    def __enter__(self) -> LocalIssuer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what it serves ------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        if self.metadata_override is not None:
            return self.metadata_override
        return {
            "issuer": self.url,
            "jwks_uri": self.jwks_uri,
            "response_types_supported": ["code"],
            "token_endpoint": self.origin + "/token",
            "authorization_endpoint": self.origin + "/authorize",
        }

    def jwks(self) -> dict[str, Any]:
        with self._lock:
            keys = [public_jwk(key, kid) for kid, key in self.keys.items()]
            for jwk in keys:
                if jwk["kid"] in self.jwk_algs:
                    jwk["alg"] = self.jwk_algs[jwk["kid"]]
            return {"keys": keys}

    def rotate(self, kind: str = "RSA") -> str:
        """Add a new key (``"RSA"`` or ``"EC"``) to the served set; its kid."""
        with self._lock:
            kid = f"{kind.lower()}-{len(self.keys) + 1}"
            self.keys[kid] = new_rsa_key() if kind == "RSA" else new_ec_key()
        return kid

    # -- tokens ------------------------------------------------------------------

    def claims(self, **claims: Any) -> dict[str, Any]:
        """Default claims (this issuer, the audience, sub ``alice``, valid for 5
        minutes from ``clock()``) updated by ``claims``; a None value removes one."""
        now = int(self.clock())
        merged: dict[str, Any] = {
            "iss": self.url,
            "aud": self.audience,
            "sub": "alice",
            "iat": now,
            "exp": now + 300,
            **claims,
        }
        return {name: value for name, value in merged.items() if value is not None}

    def mint(
        self,
        *,
        kid: str | None = "rsa-1",
        alg: str | None = None,
        key: Any = None,
        header: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """A compact JWS over :meth:`claims`, signed exactly as asked (no checks).

        ``kid`` goes in the header (None: no kid) and names the signing key
        unless ``key`` is given (a private key object, or bytes for ``HS*``);
        ``alg`` defaults to RS256 or ES256 by the key's type; ``alg="none"``
        gives an empty signature; ``header`` adds or replaces header fields.
        """
        if key is None:
            key = self.keys[kid or "rsa-1"]
        if alg is None:
            alg = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
        fields: dict[str, Any] = {"alg": alg, "typ": "at+jwt"}
        if kid is not None:
            fields["kid"] = kid
        fields.update(header or {})
        signing_input = (
            b64url(json.dumps(fields).encode())
            + "."
            + b64url(json.dumps(self.claims(**claims)).encode())
        )
        if alg == "none":
            signature = b""
        else:
            signature = get_default_algorithms()[alg].sign(signing_input.encode(), key)
        return signing_input + "." + b64url(signature)

    # -- HTTP ----------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == JWKS_PATH:
                    with issuer._lock:
                        issuer.jwks_fetches += 1
                    issuer.jwks_requested.set()
                    issuer.gate.wait(WAIT)
                    self._json(issuer.jwks())
                elif self.path == urlpath(issuer.metadata_url):
                    with issuer._lock:
                        issuer.metadata_fetches += 1
                    self._json(issuer.metadata())
                else:
                    self.send_error(404)

            def _json(self, document: dict[str, Any]) -> None:
                body = json.dumps(document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        return Handler


def urlpath(url: str) -> str:
    return "/" + url.split("/", 3)[3]


@pytest.fixture
def issuer() -> Iterator[LocalIssuer]:
    """A running :class:`LocalIssuer` (RSA key ``rsa-1``, EC key ``ec-1``)."""
    with LocalIssuer() as running:
        yield running

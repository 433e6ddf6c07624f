"""OAuth 2.1 resource server: JWT access tokens checked against the issuer's JWKS.

:class:`OAuthVerifier` is an :class:`~mcplite.auth.Authenticator`.  At
:meth:`~OAuthVerifier.start` it reads the issuer's metadata (RFC 8414, falling
back to OpenID Connect discovery), takes its ``jwks_uri`` and fetches the key
set.  :meth:`~OAuthVerifier.verify` then checks a token with no I/O:

- the header: ``alg`` must be an asymmetric JWS algorithm (``none`` and the
  HMAC family are refused outright: with a public key as the HMAC secret, anyone
  could sign), and must fit the key the ``kid`` names (RSA: ``RS*``/``PS*``; EC:
  the ``ES*`` of its curve; OKP: ``EdDSA``) and that key's own ``alg`` if it has
  one.  Keys come only from the issuer's JWKS, never from the token (``jku``,
  ``jwk``, ``x5u`` are ignored);
- the signature (PyJWT, with exactly that one algorithm allowed);
- the claims: ``iss`` equal to the issuer, ``aud`` naming the audience, ``exp``
  present and not past, ``nbf`` and ``iat`` not in the future (all with
  ``leeway`` seconds of clock skew), ``sub`` a non-empty string.

A ``kid`` missing from the cached set makes :meth:`~OAuthVerifier.verify`
return None, and :meth:`~OAuthVerifier.verify_async` refetches the set (the
issuer may have rotated its keys).  Refetches happen at most once per
``min_refresh_interval`` and concurrent callers share one, so tokens with made-up
``kid`` values cannot make us hammer the issuer.

Fetches use only the standard library (``urllib`` in a worker thread, bounded in
time and size).  PyJWT with ``cryptography`` is the optional extra
``mcplite[oauth]``; this module imports without it, and constructing a verifier
without it raises :class:`ImportError` saying what to install.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..core.context import Caller
from ..core.errors import Unauthenticated

__all__ = ["OAuthVerifier"]

log = logging.getLogger("mcplite.auth")

#: The most we read of a metadata document or a key set.
MAX_DOCUMENT = 1 << 20
#: Longer bearer tokens are refused before any parsing.
MAX_TOKEN = 32 * 1024

#: The JWS algorithms each key type may verify (RFC 7518, RFC 8037).  Symmetric
#: (``HS*``) and ``none`` appear nowhere, so they can never be accepted.
_RSA_ALGS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_ALG_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521", "ES256K": "secp256k1"}
_OKP_CURVES = frozenset({"Ed25519", "Ed448"})
_ALLOWED_ALGS = _RSA_ALGS | _EC_ALG_CURVES.keys() | {"EdDSA"}

_INSTALL_HINT = "OAuth needs PyJWT with cryptography: pip install 'mcplite[oauth]'"


def _require_jwt() -> Any:
    """The ``jwt`` module, or ImportError with the install hint."""
    try:
        import cryptography  # noqa: F401  # PyJWT verifies RSA/EC/EdDSA only with it
        import jwt
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return jwt


def _refuse(why: str) -> Unauthenticated:
    return Unauthenticated(f"Unauthenticated: {why}")


@dataclass(frozen=True, slots=True)
class _Key:
    """One usable verification key from the JWKS."""

    kid: str | None
    kty: str
    crv: str | None
    alg: str | None  # the JWK's own "alg", when it names one
    key: Any  # the cryptography public key (PyJWK.key)

    def fits(self, alg: str) -> bool:
        if self.alg is not None and self.alg != alg:
            return False
        if self.kty == "RSA":
            return alg in _RSA_ALGS
        if self.kty == "EC":
            return _EC_ALG_CURVES.get(alg) == self.crv
        if self.kty == "OKP":
            return alg == "EdDSA" and self.crv in _OKP_CURVES
        return False


def metadata_urls(issuer: str) -> list[str]:
    """Where the issuer's metadata may be, in the order we try them.

    RFC 8414 section 3.1 puts the well-known segment between the host and the
    issuer's path; OpenID Connect Discovery appends it to the issuer (for an
    issuer without a path the two agree).  MCP's authorization spec tries these
    three in this order.
    """
    parts = urllib.parse.urlsplit(issuer)
    path = parts.path.rstrip("/")

    def at(well_known: str) -> str:
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, well_known, "", ""))

    urls = [
        at("/.well-known/oauth-authorization-server" + path),
        at("/.well-known/openid-configuration" + path),
        at(path + "/.well-known/openid-configuration"),
    ]
    return list(dict.fromkeys(urls))


class _NoDowngrade(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but only to http(s), and never from https to http."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        scheme = urllib.parse.urlsplit(newurl).scheme
        if scheme not in ("http", "https") or (req.type == "https" and scheme != "https"):
            raise urllib.error.HTTPError(newurl, code, "refused redirect", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _FetchError(Exception):
    """A document could not be fetched or is not a JSON object (the reason is logged)."""


class OAuthVerifier:
    """Verifies JWT access tokens from one issuer, for one audience.

    ``issuer`` is the issuer identifier exactly as tokens carry it in ``iss``;
    ``audience`` is this resource server's identifier (tokens must name it in
    ``aud``).  ``jwks_uri`` skips discovery.  ``leeway`` is the clock skew
    allowed on ``exp``/``nbf``/``iat``; ``clock`` is the time source (seconds since
    the epoch) for both those checks and the refresh interval.  ``timeout`` bounds
    each fetch; ``ssl_context`` verifies the issuer's https (default: the
    system's trust store).

    Raises :class:`ImportError` if PyJWT or cryptography is missing.
    """

    def __init__(
        self,
        issuer: str,
        audience: str,
        *,
        jwks_uri: str | None = None,
        leeway: float = 30.0,
        clock: Callable[[], float] = time.time,
        timeout: float = 5.0,
        min_refresh_interval: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._jwt = _require_jwt()
        if not issuer:
            raise ValueError("the OAuth issuer must be a URL")
        if not audience:
            raise ValueError("the OAuth audience must not be empty")
        for url in (issuer, jwks_uri):
            if url is not None and urllib.parse.urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"not an http(s) URL: {url!r}")
        self.issuer = issuer
        self.audience = audience
        self.jwks_uri = jwks_uri
        self.leeway = leeway
        self.timeout = timeout
        self.min_refresh_interval = min_refresh_interval
        self._clock = clock
        self._opener = urllib.request.build_opener(
            _NoDowngrade(), urllib.request.HTTPSHandler(context=ssl_context)
        )
        self._keys: list[_Key] = []
        self._fetched = False  # a key set was fetched at least once
        self._last_attempt: float | None = None
        self._refreshing: asyncio.Task[None] | None = None

    # -- verification -------------------------------------------------------

    def verify(self, token: str) -> Caller | None:
        """The caller this token stands for, without I/O.

        Returns None when the token's key is not cached yet and a refresh is
        allowed (then await :meth:`verify_async`).  Raises
        :class:`~mcplite.core.errors.Unauthenticated` for a refused token; its message
        never quotes the token.
        """
        header = self._header(token)
        key = self._key_for(header)
        if key is None:
            if self._may_refresh():
                return None
            raise self._unknown_key()
        return self._check(token, header["alg"], key)

    async def verify_async(self, token: str) -> Caller:
        """Like :meth:`verify`, refreshing the key set first if the token's key is
        not cached (at most once per ``min_refresh_interval``, one fetch shared by
        concurrent callers).  Raises :class:`~mcplite.core.errors.Unauthenticated`."""
        header = self._header(token)
        key = self._key_for(header)
        if key is None:
            await self._refresh()
            key = self._key_for(header)
            if key is None:
                raise self._unknown_key()
        return self._check(token, header["alg"], key)

    def _header(self, token: str) -> dict[str, Any]:
        """The token's JOSE header, with an acceptable ``alg`` (else refused)."""
        if len(token) > MAX_TOKEN:
            raise _refuse("token too long")
        try:
            header: dict[str, Any] = self._jwt.get_unverified_header(token)
        except self._jwt.PyJWTError:
            raise _refuse("malformed token") from None
        except Exception:  # odd input PyJWT did not anticipate: still just malformed
            raise _refuse("malformed token") from None
        alg = header.get("alg")
        if not isinstance(alg, str):
            raise _refuse("malformed token (no alg)")
        if alg.lower() == "none":
            raise _refuse("unsigned tokens (alg none) are not accepted")
        if alg.upper().startswith("HS"):
            name = alg if alg in ("HS256", "HS384", "HS512") else "HMAC"  # never echo junk
            raise _refuse(f"symmetric algorithm {name} is not accepted")
        if alg not in _ALLOWED_ALGS:
            raise _refuse("unsupported token algorithm")
        if "crit" in header:
            raise _refuse("unsupported critical header parameters")
        return header

    def _key_for(self, header: Mapping[str, Any]) -> _Key | None:
        """The cached key the header names (refused if its alg does not fit)."""
        kid = header.get("kid")
        if kid is None:
            # No kid: only unambiguous with a single key in the set.
            if len(self._keys) > 1:
                raise _refuse("token has no key id (kid) and the issuer has several keys")
            candidates = self._keys
        else:
            candidates = [key for key in self._keys if key.kid == kid]
        if not candidates:
            return None
        alg = header["alg"]
        for key in candidates:
            if key.fits(alg):
                return key
        raise _refuse(f"algorithm {alg} does not match the signing key")

    def _check(self, token: str, alg: str, key: _Key) -> Caller:
        """Verify the signature and claims; the caller, or Unauthenticated."""
        jwt = self._jwt
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                # Times are checked below against our clock (PyJWT reads the wall
                # clock); requiring the claims here still refuses tokens without them.
                options={
                    "require": ["exp", "iss", "aud", "sub"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.PyJWTError as exc:
            raise _refuse(_reason(jwt.exceptions, exc, alg)) from None
        except Exception:  # odd input PyJWT did not anticipate: still just malformed
            raise _refuse("malformed token") from None
        self._check_times(claims)
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise _refuse("token subject must be a non-empty string")
        return Caller(subject, _scopes(claims), MappingProxyType(claims))

    def _check_times(self, claims: Mapping[str, Any]) -> None:
        now = self._clock()
        leeway = self.leeway
        exp = _number(claims, "exp")
        assert exp is not None  # required above
        if exp <= now - leeway:
            raise _refuse("token expired")
        nbf = _number(claims, "nbf")
        if nbf is not None and nbf > now + leeway:
            raise _refuse("token not yet valid (nbf)")
        iat = _number(claims, "iat")
        if iat is not None and iat > now + leeway:
            raise _refuse("token issued in the future (iat)")

    def _unknown_key(self) -> Unauthenticated:
        if not self._fetched:
            return _refuse("the issuer's signing keys could not be fetched; try again later")
        return _refuse("token signed by an unknown key (kid)")

    # -- key set --------------------------------------------------------------

    def _may_refresh(self) -> bool:
        if self._refreshing is not None:
            return True
        last = self._last_attempt
        if last is None:
            return True
        elapsed = self._clock() - last
        return elapsed >= self.min_refresh_interval or elapsed < 0  # < 0: the clock was set back

    async def _refresh(self) -> None:
        """Refetch the key set unless one was fetched within the interval; join a
        refresh already under way.  Never raises (failures are logged)."""
        task = self._refreshing
        if task is None:
            if not self._may_refresh():
                return
            task = self._begin_refresh(raise_config_errors=False)
        # wait, not await: a caller that gives up must not cancel the fetch the
        # others share, and a failure is the refresher's to report, not ours.
        await asyncio.wait([task])

    def _begin_refresh(self, raise_config_errors: bool) -> asyncio.Task[None]:
        task = asyncio.ensure_future(self._load_keys(raise_config_errors))
        self._refreshing = task
        task.add_done_callback(self._refreshed)
        return task

    def _refreshed(self, task: asyncio.Task[None]) -> None:
        if self._refreshing is task:
            self._refreshing = None
        error = None if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, ValueError):  # start() raises those
            log.error("refreshing the OAuth signing keys failed", exc_info=error)

    async def start(self) -> None:
        """Discover the issuer's ``jwks_uri`` (unless given) and fetch its keys.

        An unreachable issuer is logged (logger ``mcplite.auth``) and tried again
        when a token needs its keys.  Raises :class:`ValueError` for what looks
        like misconfiguration: metadata naming another issuer, or no usable
        ``jwks_uri``.
        """
        task = self._refreshing or self._begin_refresh(raise_config_errors=True)
        await asyncio.shield(task)

    async def _load_keys(self, raise_config_errors: bool = False) -> None:
        self._last_attempt = self._clock()
        try:
            if self.jwks_uri is None:
                self.jwks_uri = await self._discover()
                if self.jwks_uri is None:
                    return
            try:
                document = await self._fetch(self.jwks_uri)
            except _FetchError as exc:
                log.warning(
                    "could not fetch the OAuth signing keys from %s: %s; "
                    "tokens will wait until a refetch succeeds",
                    self.jwks_uri,
                    exc,
                )
                return
            keys = self._parse_keys(document)
        except ValueError as exc:
            if raise_config_errors:
                raise
            log.error("%s", exc)
            return
        if not keys:
            log.warning("the OAuth key set at %s has no usable signing keys", self.jwks_uri)
            return
        self._keys = keys
        self._fetched = True
        log.info("loaded %d OAuth signing key(s) from %s", len(keys), self.jwks_uri)

    async def _discover(self) -> str | None:
        """The ``jwks_uri`` from the issuer's metadata; None (logged) if unreachable."""
        problems = []
        for url in metadata_urls(self.issuer):
            try:
                metadata = await self._fetch(url)
            except _FetchError as exc:
                problems.append(f"{url}: {exc}")
                continue
            if metadata.get("issuer") != self.issuer:
                raise ValueError(
                    f"the OAuth metadata at {url} names issuer {metadata.get('issuer')!r}, "
                    f"not {self.issuer!r} (RFC 8414 section 3.3: they must be identical)"
                )
            jwks_uri = metadata.get("jwks_uri")
            if not isinstance(jwks_uri, str) or urllib.parse.urlsplit(jwks_uri).scheme not in (
                "http",
                "https",
            ):
                raise ValueError(f"the OAuth metadata at {url} has no usable jwks_uri")
            return jwks_uri
        log.warning(
            "could not read the OAuth issuer's metadata (%s); tokens will wait until it answers",
            "; ".join(problems),
        )
        return None

    def _parse_keys(self, document: Mapping[str, Any]) -> list[_Key]:
        raw = document.get("keys")
        if not isinstance(raw, list):
            raise ValueError(f"the OAuth key set at {self.jwks_uri} has no 'keys' list")
        keys = []
        for entry in raw:
            if not isinstance(entry, dict):
                continue
            kty = entry.get("kty")
            if kty not in ("RSA", "EC", "OKP"):
                continue  # "oct" (symmetric) keys are never used
            if entry.get("use", "sig") != "sig":
                continue
            alg = entry.get("alg")
            if alg is not None and alg not in _ALLOWED_ALGS:
                continue
            kid = entry.get("kid")
            try:
                jwk = self._jwt.PyJWK(entry, "EdDSA" if kty == "OKP" else alg)
            except self._jwt.PyJWTError as exc:
                log.warning("skipping an unusable OAuth signing key (kid %r): %s", kid, exc)
                continue
            keys.append(
                _Key(
                    kid if isinstance(kid, str) else None,
                    kty,
                    entry.get("crv") if isinstance(entry.get("crv"), str) else None,
                    alg,
                    jwk.key,
                )
            )
        return keys

    async def _fetch(self, url: str) -> dict[str, Any]:
        return await asyncio.to_thread(self._fetch_blocking, url)

    def _fetch_blocking(self, url: str) -> dict[str, Any]:
        """GET a JSON object (in a worker thread); :class:`_FetchError` says why not."""
        request = urllib.request.Request(
            url, headers={"Accept": "application/json", "User-Agent": "mcplite"}
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                body = response.read(MAX_DOCUMENT + 1)
        except urllib.error.HTTPError as exc:
            raise _FetchError(f"HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:  # URLError, timeouts, TLS errors
            raise _FetchError(str(getattr(exc, "reason", exc))) from None
        if len(body) > MAX_DOCUMENT:
            raise _FetchError(f"larger than {MAX_DOCUMENT} bytes")
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            raise _FetchError("not JSON") from None
        if not isinstance(document, dict):
            raise _FetchError("not a JSON object")
        return document


def _reason(errors: Any, exc: Exception, alg: str) -> str:
    """A short reason for PyJWT's exception (its own text may quote the token)."""
    if isinstance(exc, errors.InvalidSignatureError):
        return "bad token signature"
    if isinstance(exc, errors.MissingRequiredClaimError):
        return f"token has no {exc.claim} claim"
    if isinstance(exc, errors.InvalidAudienceError):
        return "token is not for this audience"
    if isinstance(exc, errors.InvalidIssuerError):
        return "token is from another issuer"
    if isinstance(exc, errors.InvalidAlgorithmError):
        return f"algorithm {alg} does not match the signing key"
    subject_error = getattr(errors, "InvalidSubjectError", None)  # PyJWT >= 2.10
    if subject_error is not None and isinstance(exc, subject_error):
        return "token subject must be a non-empty string"
    return "malformed token"


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refuse(f"token claim {name} must be a number")
    return float(value)


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """Scopes from ``scope`` (RFC 8693/9068: space-separated) or ``scp`` (a list,
    or a string as some issuers send it)."""
    value = claims.get("scope", claims.get("scp"))
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return frozenset(value)
    raise _refuse("token scope claim must be a string or a list of strings")

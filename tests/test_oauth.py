"""OAuthVerifier against a real local issuer: discovery, JWKS caching and refresh,
and every way a JWT access token is refused."""

from __future__ import annotations

import asyncio
import logging
import ssl
import subprocess
import sys
from collections.abc import Iterator

import pytest
import trustme
from conftest import ROOT, WAIT, FakeClock
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from oauth_support import AUDIENCE, LocalIssuer, b64url, new_ec_key, new_rsa_key

from mcplite.auth import Auth
from mcplite.auth.oauth import OAuthVerifier, metadata_urls
from mcplite.core.context import Caller
from mcplite.core.errors import Unauthenticated

LEEWAY = 30.0
INTERVAL = 30.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def issuer(clock: FakeClock) -> Iterator[LocalIssuer]:
    with LocalIssuer(clock=clock) as running:
        yield running


@pytest.fixture
async def verifier(issuer: LocalIssuer, clock: FakeClock) -> OAuthVerifier:
    verifier = OAuthVerifier(
        issuer.url, AUDIENCE, clock=clock, leeway=LEEWAY, min_refresh_interval=INTERVAL
    )
    await verifier.start()
    assert issuer.jwks_fetches == 1
    return verifier


def accepted(verifier: OAuthVerifier, token: str) -> Caller:
    caller = verifier.verify(token)
    assert caller is not None
    return caller


def refused(verifier: OAuthVerifier, token: str, match: str) -> str:
    """Assert ``verify`` refuses the token with a message matching ``match`` that
    does not quote the token; the message."""
    with pytest.raises(Unauthenticated, match=match) as caught:
        verifier.verify(token)
    assert_no_token(caught.value, token)
    return caught.value.message


def assert_no_token(error: Unauthenticated, token: str) -> None:
    text = f"{error} {error.message} {error.data}"
    for part in token.split("."):
        if len(part) >= 8:
            assert part not in text


# -- accepted tokens -------------------------------------------------------------


async def test_a_good_token_becomes_a_caller_with_its_subject_scopes_and_claims(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    token = issuer.mint(sub="alice", scope="tools:read tools:write", tenant="acme")
    caller = accepted(verifier, token)
    assert caller.subject == "alice"
    assert caller.scopes == {"tools:read", "tools:write"}
    assert caller.claims["tenant"] == "acme"
    assert caller.claims["iss"] == issuer.url
    assert caller.claims["aud"] == AUDIENCE


async def test_scopes_may_come_as_an_scp_list(verifier: OAuthVerifier, issuer: LocalIssuer) -> None:
    caller = accepted(verifier, issuer.mint(scp=["files:read", "files:write"]))
    assert caller.scopes == {"files:read", "files:write"}


async def test_a_token_without_scopes_has_none(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    assert accepted(verifier, issuer.mint()).scopes == frozenset()


async def test_an_audience_list_naming_ours_is_accepted(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    assert accepted(verifier, issuer.mint(aud=["other", AUDIENCE])).subject == "alice"


@pytest.mark.parametrize("alg", ["RS256", "RS384", "RS512", "PS256", "PS512"])
async def test_rsa_keys_verify_every_rsa_algorithm(
    verifier: OAuthVerifier, issuer: LocalIssuer, alg: str
) -> None:
    assert accepted(verifier, issuer.mint(alg=alg)).subject == "alice"


async def test_an_ec_key_verifies_es256(verifier: OAuthVerifier, issuer: LocalIssuer) -> None:
    assert accepted(verifier, issuer.mint(kid="ec-1", alg="ES256")).subject == "alice"


async def test_an_issuer_with_a_path_is_discovered_where_rfc_8414_puts_its_metadata(
    clock: FakeClock,
) -> None:
    with LocalIssuer(path="/tenants/a", clock=clock) as issuer:
        assert issuer.metadata_url.endswith("/.well-known/oauth-authorization-server/tenants/a")
        verifier = OAuthVerifier(issuer.url, AUDIENCE, clock=clock)
        await verifier.start()
        assert issuer.metadata_fetches == 1
        assert verifier.jwks_uri == issuer.jwks_uri
        assert accepted(verifier, issuer.mint()).subject == "alice"


def test_metadata_is_looked_for_by_rfc_8414_then_openid_connect() -> None:
    assert metadata_urls("https://as.example") == [
        "https://as.example/.well-known/oauth-authorization-server",
        "https://as.example/.well-known/openid-configuration",
    ]
    assert metadata_urls("https://as.example/t/1/") == [
        "https://as.example/.well-known/oauth-authorization-server/t/1",
        "https://as.example/.well-known/openid-configuration/t/1",
        "https://as.example/t/1/.well-known/openid-configuration",
    ]


async def test_a_given_jwks_uri_skips_discovery(issuer: LocalIssuer, clock: FakeClock) -> None:
    verifier = OAuthVerifier(issuer.url, AUDIENCE, jwks_uri=issuer.jwks_uri, clock=clock)
    await verifier.start()
    assert issuer.metadata_fetches == 0
    assert accepted(verifier, issuer.mint()).subject == "alice"


async def test_the_auth_of_a_binding_accepts_a_bearer_jwt(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    auth = Auth([verifier])
    caller = auth.authenticate("Bearer " + issuer.mint(scope="a"))
    assert isinstance(caller, Caller)
    assert caller.scopes == {"a"}


# -- time ----------------------------------------------------------------------------


async def test_an_expired_token_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer, clock: FakeClock
) -> None:
    token = issuer.mint()  # valid for 300 s
    clock.advance(300 + LEEWAY - 1)
    accepted(verifier, token)  # within the leeway
    clock.advance(1)
    assert refused(verifier, token, "token expired") == "Unauthenticated: token expired"


async def test_a_token_without_exp_is_refused(verifier: OAuthVerifier, issuer: LocalIssuer) -> None:
    refused(verifier, issuer.mint(exp=None), "no exp claim")


async def test_a_token_whose_exp_is_not_a_number_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    refused(verifier, issuer.mint(exp="tomorrow"), "exp must be a number")


async def test_a_token_not_yet_valid_is_refused_until_its_nbf(
    verifier: OAuthVerifier, issuer: LocalIssuer, clock: FakeClock
) -> None:
    token = issuer.mint(nbf=int(clock()) + 120)
    refused(verifier, token, r"not yet valid \(nbf\)")
    clock.advance(120 - LEEWAY)
    assert accepted(verifier, token).subject == "alice"


async def test_a_token_issued_in_the_future_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer, clock: FakeClock
) -> None:
    refused(verifier, issuer.mint(iat=int(clock()) + 600), "issued in the future")


# -- claims ----------------------------------------------------------------------------


async def test_a_token_for_another_audience_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    refused(verifier, issuer.mint(aud="https://other.example"), "not for this audience")
    refused(verifier, issuer.mint(aud=["a", "b"]), "not for this audience")
    refused(verifier, issuer.mint(aud=None), "no aud claim")


async def test_a_token_from_another_issuer_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    refused(verifier, issuer.mint(iss="https://evil.example"), "another issuer")
    refused(verifier, issuer.mint(iss=issuer.url + "/"), "another issuer")
    refused(verifier, issuer.mint(iss=None), "no iss claim")


async def test_a_token_without_a_subject_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    refused(verifier, issuer.mint(sub=None), "no sub claim")
    refused(verifier, issuer.mint(sub=""), "sub")
    refused(verifier, issuer.mint(sub=42), "subject must be a non-empty string")


async def test_a_malformed_scope_claim_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    refused(verifier, issuer.mint(scp=["ok", 3]), "scope claim")


# -- signatures and algorithms ------------------------------------------------------


async def test_a_token_signed_by_another_key_with_the_same_kid_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    refused(verifier, issuer.mint(kid="rsa-1", key=new_rsa_key()), "bad token signature")
    refused(verifier, issuer.mint(kid="ec-1", key=new_ec_key()), "bad token signature")


async def test_a_token_whose_claims_were_changed_after_signing_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    header, _, signature = issuer.mint(sub="alice").split(".")
    forged_claims = issuer.mint(sub="admin").split(".")[1]
    refused(verifier, f"{header}.{forged_claims}.{signature}", "bad token signature")


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
async def test_an_unsigned_token_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer, alg: str
) -> None:
    header = b64url(f'{{"alg":"{alg}","typ":"JWT","kid":"rsa-1"}}'.encode())
    claims = issuer.mint().split(".")[1]
    refused(verifier, f"{header}.{claims}.", "alg none")
    refused(verifier, f"{header}.{claims}", "malformed")


@pytest.mark.parametrize("alg", ["HS256", "HS384", "HS512"])
async def test_hmac_signed_with_the_public_key_as_secret_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer, alg: str
) -> None:
    # The classic key confusion: a verifier that let the token pick the algorithm
    # would use the issuer's public key (which anyone can fetch) as the HMAC secret.
    public_pem = (
        issuer.keys["rsa-1"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    token = issuer.mint(kid="rsa-1", alg=alg, key=public_pem, sub="admin")
    refused(verifier, token, f"symmetric algorithm {alg}")


async def test_an_rsa_algorithm_on_an_ec_key_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    token = issuer.mint(kid="ec-1", alg="RS256", key=issuer.keys["rsa-1"])
    refused(verifier, token, "RS256 does not match the signing key")


async def test_an_ec_algorithm_of_another_curve_or_on_an_rsa_key_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    token = issuer.mint(kid="ec-1", alg="ES384", key=new_ec_key(ec.SECP384R1()))
    refused(verifier, token, "ES384 does not match")
    refused(verifier, issuer.mint(kid="rsa-1", alg="ES256", key=issuer.keys["ec-1"]), "ES256")


async def test_an_algorithm_other_than_the_one_the_jwk_names_is_refused(
    issuer: LocalIssuer, clock: FakeClock
) -> None:
    issuer.jwk_algs["rsa-1"] = "PS256"
    verifier = OAuthVerifier(issuer.url, AUDIENCE, clock=clock)
    await verifier.start()
    refused(verifier, issuer.mint(alg="RS256"), "RS256 does not match the signing key")
    assert accepted(verifier, issuer.mint(alg="PS256")).subject == "alice"


async def test_an_unknown_algorithm_is_refused(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    header = b64url(b'{"alg":"XS999","kid":"rsa-1"}')
    refused(verifier, f"{header}.{issuer.mint().split('.')[1]}.c2ln", "unsupported token algorithm")


@pytest.mark.parametrize(
    "token",
    ["", "abc", "a.b.c", "a.b", "....", "eyJhbGciOiJSUzI1NiJ9.!!!.abc", "x" * 40_000],
)
async def test_a_malformed_token_is_refused(verifier: OAuthVerifier, token: str) -> None:
    refused(verifier, token, "malformed token|too long")


async def test_a_token_without_kid_is_refused_when_the_issuer_has_several_keys(
    verifier: OAuthVerifier, issuer: LocalIssuer
) -> None:
    refused(verifier, issuer.mint(kid=None, key=issuer.keys["rsa-1"]), "no key id")


# -- key refresh -------------------------------------------------------------------


async def test_a_rotated_key_is_fetched_once_and_then_accepted(
    verifier: OAuthVerifier, issuer: LocalIssuer, clock: FakeClock
) -> None:
    kid = issuer.rotate()
    token = issuer.mint(kid=kid, scope="s")
    clock.advance(INTERVAL)
    assert verifier.verify(token) is None  # its key is not cached: the caller must await
    caller = await verifier.verify_async(token)
    assert (caller.subject, caller.scopes) == ("alice", frozenset({"s"}))
    assert issuer.jwks_fetches == 2
    assert accepted(verifier, issuer.mint(kid=kid)).subject == "alice"  # now cached
    assert accepted(verifier, issuer.mint()).subject == "alice"  # the old key still works
    assert issuer.jwks_fetches == 2


async def test_the_auth_of_a_binding_hands_back_an_awaitable_for_a_new_key(
    verifier: OAuthVerifier, issuer: LocalIssuer, clock: FakeClock
) -> None:
    token = issuer.mint(kid=issuer.rotate())
    clock.advance(INTERVAL)
    pending = Auth([verifier]).authenticate("Bearer " + token)
    assert callable(pending)  # the binding awaits it in the request's task
    assert (await pending()).subject == "alice"


async def test_an_unknown_kid_is_refused_and_does_not_refetch_within_the_interval(
    verifier: OAuthVerifier, issuer: LocalIssuer, clock: FakeClock
) -> None:
    clock.advance(INTERVAL)
    first = issuer.mint(kid="made-up-1", key=new_rsa_key())
    assert verifier.verify(first) is None
    with pytest.raises(Unauthenticated, match="unknown key") as caught:
        await verifier.verify_async(first)
    assert_no_token(caught.value, first)
    assert issuer.jwks_fetches == 2

    # A flood of made-up kids within the interval: refused at once, no fetch.
    clock.advance(INTERVAL - 1)
    stranger = new_rsa_key()
    for n in range(20):
        token = issuer.mint(kid=f"made-up-{n + 2}", key=stranger)
        refused(verifier, token, "unknown key")
        with pytest.raises(Unauthenticated, match="unknown key"):
            await verifier.verify_async(token)
    assert issuer.jwks_fetches == 2

    # A key rotated in meanwhile is found on the first refetch the interval allows.
    kid = issuer.rotate()
    refused(verifier, issuer.mint(kid=kid), "unknown key")
    clock.advance(1)
    assert verifier.verify(issuer.mint(kid=kid)) is None
    assert (await verifier.verify_async(issuer.mint(kid=kid))).subject == "alice"
    assert issuer.jwks_fetches == 3


async def test_concurrent_callers_with_a_new_kid_share_one_fetch(
    verifier: OAuthVerifier, issuer: LocalIssuer, clock: FakeClock
) -> None:
    kid = issuer.rotate()
    clock.advance(INTERVAL)
    tokens = [issuer.mint(kid=kid, sub=f"user-{n}") for n in range(10)]
    tokens += [issuer.mint(kid=f"made-up-{n}", key=new_rsa_key()) for n in range(3)]
    issuer.gate.clear()
    issuer.jwks_requested.clear()
    try:
        tasks = [asyncio.create_task(verifier.verify_async(token)) for token in tokens]
        assert await asyncio.to_thread(issuer.jwks_requested.wait, WAIT)
        # Every caller is waiting on the one fetch under way; a new one joins it.
        assert verifier.verify(tokens[0]) is None
    finally:
        issuer.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT)
    assert [r.subject for r in results[:10] if isinstance(r, Caller)] == [
        f"user-{n}" for n in range(10)
    ]
    assert all(isinstance(r, Unauthenticated) for r in results[10:])
    assert issuer.jwks_fetches == 2


async def test_a_caller_that_gives_up_does_not_cancel_the_shared_fetch(
    verifier: OAuthVerifier, issuer: LocalIssuer, clock: FakeClock
) -> None:
    kid = issuer.rotate()
    clock.advance(INTERVAL)
    issuer.gate.clear()
    issuer.jwks_requested.clear()
    try:
        quitter = asyncio.create_task(verifier.verify_async(issuer.mint(kid=kid)))
        stayer = asyncio.create_task(verifier.verify_async(issuer.mint(kid=kid, sub="bob")))
        assert await asyncio.to_thread(issuer.jwks_requested.wait, WAIT)
        quitter.cancel()
    finally:
        issuer.gate.set()
    assert (await asyncio.wait_for(stayer, WAIT)).subject == "bob"
    with pytest.raises(asyncio.CancelledError):
        await quitter
    assert issuer.jwks_fetches == 2


# -- an issuer that is away or misconfigured ------------------------------------------


async def test_an_unreachable_issuer_is_logged_at_start_and_tokens_are_refused_clearly(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with LocalIssuer(clock=clock) as gone:
        pass  # closed: its port now refuses connections
    verifier = OAuthVerifier(gone.url, AUDIENCE, clock=clock, timeout=WAIT)
    with caplog.at_level(logging.WARNING, logger="mcplite.auth"):
        await verifier.start()
    assert any(r.name == "mcplite.auth" and gone.origin in r.getMessage() for r in caplog.records)
    token = gone.mint()
    refused(verifier, token, "signing keys could not be fetched")
    clock.advance(INTERVAL)
    assert verifier.verify(token) is None  # worth another try now
    with pytest.raises(Unauthenticated, match="signing keys could not be fetched") as caught:
        await verifier.verify_async(token)
    assert_no_token(caught.value, token)
    assert all(token not in r.getMessage() for r in caplog.records)


async def test_an_issuer_that_answers_later_is_used_once_the_interval_passed(
    issuer: LocalIssuer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    issuer.metadata_override = {}  # as if not configured yet: no issuer, no keys
    verifier = OAuthVerifier(issuer.url, AUDIENCE, clock=clock)
    with pytest.raises(ValueError, match="names issuer None"):
        await verifier.start()
    issuer.metadata_override = None
    token = issuer.mint()
    refused(verifier, token, "could not be fetched")
    clock.advance(INTERVAL)
    assert verifier.verify(token) is None
    assert (await verifier.verify_async(token)).subject == "alice"


async def test_metadata_naming_another_issuer_is_a_configuration_error(
    issuer: LocalIssuer, clock: FakeClock
) -> None:
    issuer.metadata_override = {**issuer.metadata(), "issuer": "https://evil.example"}
    verifier = OAuthVerifier(issuer.url, AUDIENCE, clock=clock)
    with pytest.raises(ValueError, match=r"names issuer 'https://evil\.example'"):
        await verifier.start()
    assert issuer.jwks_fetches == 0


async def test_metadata_without_a_jwks_uri_is_a_configuration_error(
    issuer: LocalIssuer, clock: FakeClock
) -> None:
    issuer.metadata_override = {"issuer": issuer.url}
    with pytest.raises(ValueError, match="no usable jwks_uri"):
        await OAuthVerifier(issuer.url, AUDIENCE, clock=clock).start()


async def test_a_document_over_one_mebibyte_is_not_read(
    issuer: LocalIssuer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    issuer.metadata_override = {"issuer": issuer.url, "padding": "x" * (1 << 20)}
    verifier = OAuthVerifier(issuer.url, AUDIENCE, clock=clock)
    with caplog.at_level(logging.WARNING, logger="mcplite.auth"):
        await verifier.start()
    assert any("larger than 1048576 bytes" in r.getMessage() for r in caplog.records)
    refused(verifier, issuer.mint(), "could not be fetched")


def https_issuer(clock: FakeClock) -> tuple[LocalIssuer, ssl.SSLContext]:
    """An issuer serving https with a certificate from a throw-away CA, and a
    client context trusting that CA."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return LocalIssuer(clock=clock, ssl_context=server), client


async def test_an_https_issuer_is_trusted_through_the_given_ssl_context(clock: FakeClock) -> None:
    issuer, trusting = https_issuer(clock)
    with issuer:
        assert issuer.url.startswith("https://")
        verifier = OAuthVerifier(issuer.url, AUDIENCE, clock=clock, ssl_context=trusting)
        await verifier.start()
        assert accepted(verifier, issuer.mint()).subject == "alice"


async def test_an_https_issuer_with_an_untrusted_certificate_is_not_believed(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    issuer, _ = https_issuer(clock)
    with issuer:
        verifier = OAuthVerifier(issuer.url, AUDIENCE, clock=clock, timeout=WAIT)
        with caplog.at_level(logging.WARNING, logger="mcplite.auth"):
            await verifier.start()
        assert issuer.jwks_fetches == 0
        assert any("CERTIFICATE_VERIFY_FAILED" in r.getMessage() for r in caplog.records)
        refused(verifier, issuer.mint(), "could not be fetched")


def test_a_non_http_url_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="not an http"):
        OAuthVerifier("file:///etc", AUDIENCE)
    with pytest.raises(ValueError, match="not an http"):
        OAuthVerifier("https://as.example", AUDIENCE, jwks_uri="file:///etc/passwd")


# -- the optional dependency ---------------------------------------------------------


def test_without_pyjwt_the_module_imports_and_construction_says_what_to_install() -> None:
    script = (
        "import sys; sys.modules['jwt'] = None\n"
        "from mcplite.auth.oauth import OAuthVerifier\n"
        "try:\n"
        "    OAuthVerifier('https://as.example', 'aud')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=WAIT
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'mcplite[oauth]'" in done.stdout

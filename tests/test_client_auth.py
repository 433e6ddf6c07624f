"""mcplite.client against servers with TLS and bearer tokens (issue 14, the client side).

Real servers on 127.0.0.1 with ephemeral ports: in-process (conftest.start_server,
whose Dispatcher gets the Auth the Config asks for) and, for the command line, a
``python -m mcplite serve`` subprocess.  Certificates come from a throw-away CA
made by ``trustme``; a second CA stands for "a certificate nobody here trusts".
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from conftest import (
    BASE,
    PROCESS_WAIT,
    READY,
    ROOT,
    SECRET,
    WAIT,
    RunningServer,
    make_config,
    serve_process,
    start_server,
    subprocess_env,
)

from mcplite import ALWAYS, Tools
from mcplite.client import (
    AuthenticationError,
    Client,
    OverloadedError,
    PermissionDeniedError,
    RequestTimeout,
    TransportError,
    accel,
)
from mcplite.client.http import HttpTransport  # its public connection count, over TLS
from mcplite.client.sync import SyncClient

TRANSPORTS = ["https", "grpcs"]


@pytest.fixture(autouse=True)
def tls_sockets_the_plain_path_leaves() -> Iterator[None]:
    """Off its speed path (``mcplite.client.accel``), a gRPC client's ``aclose``
    cannot wait for a TLS connection's close_notify exchange, so a test's event loop
    that ends at once leaves the socket to be collected, unclosed: collected here,
    after that loop, rather than as a ResourceWarning in some later test."""
    yield
    if not accel.on():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


READER = "reader-token-0123456789abcdef"  # scope: read
ADMIN = "admin-token-0123456789abcdef"  # scopes: read admin
WRONG = "wrong-token-0123456789abcdef"  # in no token file


@dataclass(frozen=True)
class Pki:
    """PEM files: the CA the servers use, a server certificate for 127.0.0.1 (chain and
    key apart), a client certificate (chain and key apart), and another CA."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_ca: str
    tokens: str


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    client = ca.issue_cert("client.example")
    paths = {name: str(folder / f"{name}.pem") for name in Pki.__dataclass_fields__}
    ca.cert_pem.write_to_path(paths["ca"])
    server.cert_chain_pems[0].write_to_path(paths["server_cert"])
    for blob in server.cert_chain_pems[1:]:
        blob.write_to_path(paths["server_cert"], append=True)
    server.private_key_pem.write_to_path(paths["server_key"])
    client.cert_chain_pems[0].write_to_path(paths["client_cert"])
    client.private_key_pem.write_to_path(paths["client_key"])
    trustme.CA().cert_pem.write_to_path(paths["other_ca"])
    Path(paths["tokens"]).write_text(
        f"# test tokens\n{READER} read\n{ADMIN} read admin\n", encoding="utf-8"
    )
    return Pki(**paths)


def make_tools() -> Tools:
    tools = Tools()

    @tools.tool(promise_after=ALWAYS)
    async def echo(text: str) -> str:
        """Echo, always through a promise (so redeem carries the token too)."""
        return text

    @tools.tool(scopes=["admin"])
    async def purge() -> str:
        """Only for callers holding the admin scope."""
        return "purged"

    return tools


def tls_config(pki: Pki, **overrides: Any) -> Any:
    return make_config(
        certfile=pki.server_cert, keyfile=pki.server_key, auth_tokens=pki.tokens, **overrides
    )


@pytest.fixture(scope="module")
def server(pki: Pki) -> Iterator[RunningServer]:
    """HTTPS and gRPC over TLS, tokens required."""
    running = start_server(make_tools(), tls_config(pki), grpc=True)
    try:
        yield running
    finally:
        running.stop()


def url_of(server: RunningServer, transport: str) -> str:
    if transport == "https":
        return f"https://127.0.0.1:{server.port}{BASE}"
    return f"grpcs://127.0.0.1:{server.grpc_port}"


# --- the right token --------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_with_the_right_token_the_client_lists_calls_and_redeems_over_tls(
    server: RunningServer, pki: Pki, transport: str
) -> None:
    async with Client(url_of(server, transport), token=READER, cafile=pki.ca, timeout=WAIT) as c:
        names = {tool.name for tool in await c.list_tools()}
        assert {"echo", "redeem", "cancel"} <= names
        assert "purge" not in names  # discovery lists only what this caller may call

        answer = await c.call("echo", {"text": "hi"})  # a promise, redeemed by the client
        assert (answer.response_type, answer.text) == ("answer", "hi")

        promise = await c.call("echo", {"text": "later"}, wait=False)
        token = promise.promise_token
        assert token is not None
        redeemed = await c.redeem(token, wait=WAIT / 2)
        assert redeemed.text == "later"
        assert (await c.cancel(token)).text == "already finished"


def test_the_sync_client_takes_the_same_token_and_tls_options(
    server: RunningServer, pki: Pki
) -> None:
    with SyncClient(url_of(server, "https"), token=ADMIN, cafile=pki.ca, timeout=WAIT) as c:
        assert c.call("purge").text == "purged"


async def test_keep_alive_connections_are_reused_over_tls(server: RunningServer, pki: Pki) -> None:
    async with Client(url_of(server, "https"), token=READER, cafile=pki.ca, timeout=WAIT) as c:
        for _ in range(3):
            await c.list_tools()
        assert isinstance(c.transport, HttpTransport)
        assert c.transport.connections_opened == 1


# --- refusals: credentials and scopes ---------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("token", [WRONG, None], ids=["wrong-token", "no-token"])
async def test_a_wrong_or_missing_token_raises_authentication_error(
    server: RunningServer, pki: Pki, transport: str, token: str | None
) -> None:
    async with Client(url_of(server, transport), token=token, cafile=pki.ca, timeout=WAIT) as c:
        with pytest.raises(AuthenticationError) as listing:
            await c.list_tools()
        with pytest.raises(AuthenticationError) as calling:
            await c.call("echo", {"text": "hi"})
        with pytest.raises(AuthenticationError):
            await c.redeem("any-promise-token")
    for error in (listing.value, calling.value):
        assert error.code == -32041
        assert WRONG not in str(error) and WRONG not in repr(error)
        if transport == "https":
            assert error.www_authenticate is not None
            assert error.www_authenticate.startswith("Bearer")
        else:
            assert error.grpc_status == 16  # UNAUTHENTICATED


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_token_without_the_tools_scope_gets_permission_denied_naming_the_scopes(
    server: RunningServer, pki: Pki, transport: str
) -> None:
    url = url_of(server, transport)
    async with Client(url, token=READER, cafile=pki.ca, timeout=WAIT) as reader:
        with pytest.raises(PermissionDeniedError) as denied:
            await reader.call("purge")
    assert denied.value.code == -32043
    assert denied.value.scopes == ["admin"]
    if transport == "grpcs":
        assert denied.value.grpc_status == 7  # PERMISSION_DENIED
    async with Client(url, token=ADMIN, cafile=pki.ca, timeout=WAIT) as admin:
        assert (await admin.call("purge")).text == "purged"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_caller_over_its_rate_gets_overloaded_error_with_retry_after(
    pki: Pki, transport: str
) -> None:
    # A burst of one request and a refill of one per thousand seconds: the second is refused.
    running = start_server(make_tools(), tls_config(pki, rate_limit=0.001), grpc=True)
    try:
        async with Client(
            url_of(running, transport), token=READER, cafile=pki.ca, timeout=WAIT
        ) as c:
            await c.list_tools()
            with pytest.raises(OverloadedError) as limited:
                await c.list_tools()
    finally:
        running.stop()
    assert limited.value.retry_after is not None and limited.value.retry_after >= 1


# --- what an HTTP answer says beside its body: a stand-in server ------------------------


class CannedServer:
    """Answers every HTTP request with one canned response and counts the requests."""

    def __init__(self, response: bytes) -> None:
        self.response = response
        self.requests = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                await reader.readexactly(int(length.group(1)) if length else 0)
                self.requests += 1
                writer.write(self.response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}{BASE}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await asyncio.wait_for(self.server.wait_closed(), WAIT)


def canned(status: str, headers: str = "", body: bytes = b"") -> bytes:
    return f"HTTP/1.1 {status}\r\n{headers}Content-Length: {len(body)}\r\n\r\n".encode() + body


async def test_a_401_is_neither_retried_nor_a_transport_error() -> None:
    body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32041,"message":"Unauthenticated"}}'
    fake = CannedServer(canned("401 Unauthorized", 'WWW-Authenticate: Bearer realm="x"\r\n', body))
    async with fake as url, Client(url, token=WRONG, timeout=WAIT) as c:
        with pytest.raises(AuthenticationError) as refused:
            await c.call("echo", {"text": "hi"})
        with pytest.raises(AuthenticationError):
            await c.list_tools()  # idempotent, and still not sent twice
    assert fake.requests == 2
    assert refused.value.www_authenticate == 'Bearer realm="x"'


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (canned("401 Unauthorized", body=b"no"), AuthenticationError),
        (canned("403 Forbidden"), PermissionDeniedError),
        (canned("429 Too Many Requests", "Retry-After: 7\r\n"), OverloadedError),
    ],
    ids=["401", "403", "429"],
)
async def test_401_403_and_429_without_a_json_rpc_body_map_to_the_same_errors(
    answer: bytes, error: type[Exception]
) -> None:
    async with CannedServer(answer) as url, Client(url, timeout=WAIT) as c:
        with pytest.raises(error) as raised:
            await c.list_tools()
    if isinstance(raised.value, OverloadedError):
        assert raised.value.retry_after == 7  # from the Retry-After header


# --- TLS: whom the client trusts, and mutual TLS ----------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("trust", ["other-ca", "system-cas"])
async def test_a_server_certificate_the_client_does_not_trust_fails_fast(
    server: RunningServer, pki: Pki, transport: str, trust: str
) -> None:
    cafile = pki.other_ca if trust == "other-ca" else None
    async with Client(url_of(server, transport), token=READER, cafile=cafile, timeout=WAIT) as c:
        with pytest.raises(TransportError) as failed:
            await c.call("echo", {"text": "hi"})
    assert not isinstance(failed.value, RequestTimeout)  # refused, not waited out
    assert "certificate verify failed" in str(failed.value)


@pytest.fixture(scope="module")
def mutual_server(pki: Pki) -> Iterator[RunningServer]:
    """TLS that requires a client certificate signed by the test CA."""
    running = start_server(make_tools(), tls_config(pki, client_ca=pki.ca), grpc=True)
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mutual_tls_refuses_a_client_without_a_certificate(
    mutual_server: RunningServer, pki: Pki, transport: str
) -> None:
    url = url_of(mutual_server, transport)
    async with Client(url, token=READER, cafile=pki.ca, timeout=WAIT) as c:
        with pytest.raises(TransportError) as refused:
            await c.list_tools()
    assert not isinstance(refused.value, RequestTimeout)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mutual_tls_accepts_a_client_certificate_signed_by_its_ca(
    mutual_server: RunningServer, pki: Pki, transport: str
) -> None:
    url = url_of(mutual_server, transport)
    async with Client(
        url,
        token=READER,
        cafile=pki.ca,
        certfile=pki.client_cert,
        keyfile=pki.client_key,
        timeout=WAIT,
    ) as c:
        assert (await c.call("echo", {"text": "mutual"})).text == "mutual"


# --- closing a gRPC client over TLS, with its speed path on and off ---------------------

CALL_AND_END_THE_LOOP = """
import asyncio, gc, json, sys
from mcplite.client import Client

async def main() -> str:
    async with Client(sys.argv[1], token=sys.argv[2], cafile=sys.argv[3], timeout=10) as c:
        return (await c.call("purge")).text

print(asyncio.run(main()))
gc.collect()  # an unclosed socket says so now, as a ResourceWarning on stderr
print(json.dumps(sorted(m for m in sys.modules if m.startswith("mcplite.client.accel"))))
"""


def call_and_end_the_loop(url: str, pki: Pki, setting: str | None) -> tuple[list[str], str]:
    """A ``purge`` over ``url`` in a new process whose event loop ends as the client
    closes, with ``MCPLITE_ACCEL`` at ``setting`` (None: unset): the client's accel
    modules it imported, and its stderr."""
    env = subprocess_env()
    env.pop("MCPLITE_ACCEL", None)
    if setting is not None:
        env["MCPLITE_ACCEL"] = setting
    command = ["-W", "always::ResourceWarning", "-c", CALL_AND_END_THE_LOOP, url, ADMIN, pki.ca]
    done = subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT,
        env=env,
        check=True,
    )
    answer, loaded = done.stdout.splitlines()
    assert answer == "purged"
    return json.loads(loaded), done.stderr


def test_a_grpcs_client_closed_as_its_loop_ends_leaves_no_socket_open(
    server: RunningServer, pki: Pki
) -> None:
    # The speed path waits for the TLS close_notify exchange before the loop ends.
    loaded, stderr = call_and_end_the_loop(url_of(server, "grpcs"), pki, None)
    assert loaded == ["mcplite.client.accel", "mcplite.client.accel.channels"]
    assert "ResourceWarning" not in stderr, stderr


def test_with_mcplite_accel_0_a_grpcs_client_uses_grpclib_s_public_channel_alone(
    server: RunningServer, pki: Pki
) -> None:
    loaded, _ = call_and_end_the_loop(url_of(server, "grpcs"), pki, "0")
    assert loaded == ["mcplite.client.accel"]  # the gate alone


# --- options a client refuses at once ---------------------------------------------------


def test_tls_options_need_a_tls_url_and_a_bad_token_is_refused_without_being_quoted(
    pki: Pki,
) -> None:
    for url in ("http://127.0.0.1:1", "grpc://127.0.0.1:1"):
        with pytest.raises(ValueError, match="https:// or grpcs://"):
            Client(url, cafile=pki.ca)
    with pytest.raises(ValueError, match="keyfile needs a certfile"):
        Client("https://127.0.0.1:1", keyfile=pki.client_key)
    with pytest.raises(ValueError, match=r"no-such-ca\.pem"):
        Client("grpcs://127.0.0.1:1", cafile=str(Path(pki.ca).with_name("no-such-ca.pem")))
    secret = "secret-part\r\nX-Injected: 1"
    with pytest.raises(ValueError) as bad:
        Client("https://127.0.0.1:1", token=secret)
    assert "secret-part" not in str(bad.value)
    Client("http://127.0.0.1:1", token=READER)  # a token over plaintext: allowed (loopback)


# --- the command line, against a subprocess server --------------------------------------


@dataclass
class ServedUrls:
    https: str
    grpcs: str


@pytest.fixture(scope="module")
def served(pki: Pki) -> Iterator[ServedUrls]:
    """``mcplite serve mcplite.demo`` with TLS and tokens (and its access log on): its
    URLs.  Once the module's tests are done, no line of its log may hold a token."""
    args = [
        "mcplite.demo",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--secret",
        SECRET.decode(),
        "--auth-tokens",
        pki.tokens,
        "--certfile",
        pki.server_cert,
        "--keyfile",
        pki.server_key,
    ]
    with serve_process(*args) as process:
        ready = next(m for m in map(READY.search, process.lines) if m)
        https = re.search(r"https://127\.0\.0\.1:\d+\S*", ready.group(2))
        grpcs = re.search(r"grpcs://127\.0\.0\.1:\d+", ready.group(2))
        assert https and grpcs, ready.group(0)
        yield ServedUrls(https.group(0), grpcs.group(0))
        lines = process.stop()
    assert any("/rpc" in line for line in lines)  # the access log was on
    assert not any(WRONG in line or READER in line for line in lines)


def mcplite(*args: str, token_env: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MCPLITE_TOKEN"}
    if token_env is not None:
        env["MCPLITE_TOKEN"] = token_env
    return subprocess.run(
        [sys.executable, "-m", "mcplite", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=PROCESS_WAIT,
        check=False,
    )


def test_the_cli_calls_over_https_and_grpcs_with_token_and_cafile(
    served: ServedUrls, pki: Pki
) -> None:
    urls = served
    for url in (urls.https, urls.grpcs):
        done = mcplite("call", url, "echo", "text=hi", "--token", READER, "--cafile", pki.ca)
        assert (done.returncode, done.stdout, done.stderr) == (0, "hi\n", "")
    listed = mcplite("tools", urls.grpcs, "--cafile", pki.ca, token_env=READER)
    assert listed.returncode == 0, listed.stderr
    assert "echo" in listed.stdout


def test_the_cli_says_a_bad_token_in_one_line_without_printing_it(
    served: ServedUrls, pki: Pki
) -> None:
    urls = served
    for url in (urls.https, urls.grpcs):
        done = mcplite("call", url, "echo", "text=hi", "--token", WRONG, "--cafile", pki.ca)
        assert done.returncode == 8
        assert done.stdout == ""
        assert done.stderr.startswith("mcplite: error: not authenticated")
        assert done.stderr.count("\n") == 1
        assert WRONG not in done.stderr
    anonymous = mcplite("tools", urls.https, "--cafile", pki.ca)
    assert anonymous.returncode == 8
    assert "--token" in anonymous.stderr and "MCPLITE_TOKEN" in anonymous.stderr
    untrusted = mcplite("tools", urls.https, "--cafile", pki.other_ca, token_env=WRONG)
    assert untrusted.returncode == 3
    assert "certificate verify failed" in untrusted.stderr
    assert WRONG not in untrusted.stderr

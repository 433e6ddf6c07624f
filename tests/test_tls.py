"""TLS from outside (issue 14): ``--certfile``/``--keyfile`` and ``--client-ca`` on
HTTP and gRPC, with certificates made by ``trustme``.

Peers: the stdlib (``ssl``, ``http.client.HTTPSConnection``, a raw socket speaking
plaintext), ``grpcio`` secure channels, and ``python -m mcplite serve`` itself for
the URLs it announces and for refusing to start with certificate files it cannot use.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from conftest import (
    BASE,
    PROCESS_WAIT,
    READY,
    ROOT,
    WAIT,
    ServeProcess,
    call_message,
    subprocess_env,
)
from grpc_support import to_python
from test_auth import (
    ALICE,
    GRPC_OPTIONS,
    Pki,
    Served,
    bearer,
    make_pki,
    ours,
    send,
    start_served,
    tls_config,
    token_file,
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tls")


@pytest.fixture(scope="module")
def pki(folder: Path) -> Pki:
    return make_pki(folder / "server")


@pytest.fixture(scope="module")
def stranger(folder: Path) -> Pki:
    """Another CA, and a certificate it signed: trusted by nobody here."""
    return make_pki(folder / "stranger")


@pytest.fixture(scope="module")
def client_pki(folder: Path) -> Pki:
    """The CA that signs client certificates for mutual TLS."""
    return make_pki(folder / "clients", "clients")


@pytest.fixture(scope="module")
def server(pki: Pki) -> Iterator[Served]:
    """HTTPS and gRPC over TLS, no auth."""
    served = start_served(tls_config(pki), pki)
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def mutual(pki: Pki, client_pki: Pki) -> Iterator[Served]:
    """TLS that requires a client certificate signed by ``client_pki``'s CA."""
    served = start_served(tls_config(pki, client_ca=str(client_pki.ca_file)), pki)
    try:
        yield served
    finally:
        served.stop()


def echo(conn: http.client.HTTPConnection, text: str = "over TLS") -> str:
    body = json.dumps(call_message("echo", {"text": text})).encode()
    conn.request("POST", f"{BASE}/rpc", body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    reply = json.loads(response.read())
    answered: str = reply["result"]["content"][0]["text"]
    return answered


def https(served: Served, context: ssl.SSLContext) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection("127.0.0.1", served.port, timeout=WAIT, context=context)


# --- HTTPS -------------------------------------------------------------------------------------


def test_the_stdlib_client_trusting_the_ca_completes_a_handshake_and_a_call(
    server: Served, pki: Pki
) -> None:
    context = pki.client_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    conn = https(server, context)
    try:
        assert echo(conn) == "over TLS"
        assert echo(conn, "again, same connection") == "again, same connection"
        assert isinstance(conn.sock, ssl.SSLSocket)
        assert conn.sock.version() in ("TLSv1.2", "TLSv1.3")
    finally:
        conn.close()
    # The name in the certificate works too.
    named = http.client.HTTPSConnection("localhost", server.port, timeout=WAIT, context=context)
    try:
        assert echo(named) == "over TLS"
    except OSError as exc:  # localhost may resolve to ::1 where nothing listens
        pytest.skip(f"localhost does not reach 127.0.0.1 here: {exc}")
    finally:
        named.close()


def test_a_client_that_does_not_trust_the_ca_fails_verification(
    server: Served, stranger: Pki
) -> None:
    for context in (ssl.create_default_context(), stranger.client_context()):
        conn = https(server, context)
        try:
            with pytest.raises(ssl.SSLCertVerificationError):
                echo(conn)
        finally:
            conn.close()


def test_plaintext_http_to_the_tls_port_gets_no_answer_it_can_take_as_success(
    server: Served, pki: Pki
) -> None:
    request = (
        f"POST {BASE}/rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 2\r\n\r\n{}"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(request)
        received = b""
        try:
            while len(received) < 65536:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except ConnectionResetError:
            pass
    assert not received.startswith(b"HTTP/1.1 2"), received[:200]
    assert b'"result"' not in received
    # The server is still there for TLS clients.
    conn = https(server, pki.client_context())
    try:
        assert echo(conn, "still serving") == "still serving"
    finally:
        conn.close()


# --- gRPC over TLS --------------------------------------------------------------------------


def secure_channel(
    served: Served, ca: Pki, client: tuple[bytes, bytes] | None = None
) -> grpc.Channel:
    key, chain = client if client is not None else (None, None)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.ca_pem, private_key=key, certificate_chain=chain
    )
    return grpc.secure_channel(f"127.0.0.1:{served.grpc_port}", credentials, GRPC_OPTIONS)


def grpc_echo(channel: grpc.Channel, text: str = "grpc over TLS") -> str:
    answer = ours().stub(channel).CallTool(ours().request("echo", {"text": text}), timeout=WAIT)
    answered: str = to_python(answer.result)["content"][0]["text"]
    return answered


def test_a_grpcio_secure_channel_lists_and_calls(server: Served, pki: Pki) -> None:
    with secure_channel(server, pki) as channel:
        tools = ours().stub(channel).GetTools(ours().cls("Empty")(), timeout=WAIT).tools
        assert "echo" in {tool.name for tool in tools}
        assert grpc_echo(channel) == "grpc over TLS"


def test_grpc_without_tls_or_trusting_another_ca_gets_nothing(
    server: Served, stranger: Pki
) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", GRPC_OPTIONS) as channel:
        with pytest.raises(grpc.RpcError) as plain:
            grpc_echo(channel)
        assert plain.value.code() == grpc.StatusCode.UNAVAILABLE
    with secure_channel(server, stranger) as channel:
        with pytest.raises(grpc.RpcError) as untrusted:
            grpc_echo(channel)
        assert untrusted.value.code() == grpc.StatusCode.UNAVAILABLE


# --- mutual TLS -------------------------------------------------------------------------------


def client_cert(client_pki: Pki, folder: Path, name: str) -> tuple[Path, bytes, bytes]:
    """A client certificate ``client_pki``'s CA signed: one PEM file (key + chain),
    and the key and chain as grpcio wants them."""
    issued = client_pki.ca.issue_cert(f"{name}@clients.example")
    path = folder / f"{name}-client.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(path))
    chain = b"".join(blob.bytes() for blob in issued.cert_chain_pems)
    return path, issued.private_key_pem.bytes(), chain


def mutual_echo(served: Served, pki: Pki, certfile: Path | None) -> str:
    context = pki.client_context()
    if certfile is not None:
        context.load_cert_chain(str(certfile))
    conn = https(served, context)
    try:
        return echo(conn, "mutual")
    finally:
        conn.close()


def test_mutual_tls_over_https_needs_a_certificate_the_client_ca_signed(
    mutual: Served, pki: Pki, client_pki: Pki, stranger: Pki, folder: Path
) -> None:
    good, _, _ = client_cert(client_pki, folder, "good")
    assert mutual_echo(mutual, pki, good) == "mutual"
    foreign, _, _ = client_cert(stranger, folder, "foreign")
    for certfile in (None, foreign):
        # TLS 1.3 reports the refusal on the first read: an alert or a reset.
        with pytest.raises((ssl.SSLError, ConnectionResetError, http.client.RemoteDisconnected)):
            mutual_echo(mutual, pki, certfile)
    assert mutual_echo(mutual, pki, good) == "mutual"  # and the server still serves


def test_mutual_tls_over_grpc_needs_a_certificate_the_client_ca_signed(
    mutual: Served, pki: Pki, client_pki: Pki, stranger: Pki, folder: Path
) -> None:
    _, key, chain = client_cert(client_pki, folder, "grpc-good")
    with secure_channel(mutual, pki, (key, chain)) as channel:
        assert grpc_echo(channel, "mutual grpc") == "mutual grpc"
    _, foreign_key, foreign_chain = client_cert(stranger, folder, "grpc-foreign")
    for client in (None, (foreign_key, foreign_chain)):
        with secure_channel(mutual, pki, client) as channel:
            with pytest.raises(grpc.RpcError) as refused:
                grpc_echo(channel)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


# --- the CLI ----------------------------------------------------------------------------------


def serve_args(*extra: str) -> list[str]:
    return ["tests.auth_tools:tools", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", *extra]


def test_the_cli_serves_https_and_grpcs_with_a_token(pki: Pki, folder: Path) -> None:
    tokens = token_file(folder)
    server = ServeProcess(
        *serve_args(
            "--certfile",
            str(pki.certfile),
            "--keyfile",
            str(pki.keyfile),
            "--auth-tokens",
            str(tokens),
        )
    )
    try:
        ready = next(line for line in server.lines if READY.search(line))
        http_port = re.search(r"https://127\.0\.0\.1:(\d+)", ready)
        grpc_port = re.search(r"grpcs://127\.0\.0\.1:(\d+)", ready)
        assert http_port and grpc_port, ready
        served = Served(int(http_port.group(1)), int(grpc_port.group(1)), pki.client_context())
        refused = send(served, f"{BASE}/rpc", call_message("echo", {"text": "x"}))
        assert refused.status == 401
        answer = send(served, f"{BASE}/rpc", call_message("echo", {"text": "cli"}), token=ALICE)
        assert answer.json()["result"]["content"] == [{"type": "text", "text": "cli"}]
        credentials = grpc.composite_channel_credentials(
            grpc.ssl_channel_credentials(root_certificates=pki.ca_pem),
            grpc.access_token_call_credentials(ALICE),
        )
        target = f"127.0.0.1:{served.grpc_port}"
        with grpc.secure_channel(target, credentials, GRPC_OPTIONS) as channel:
            assert grpc_echo(channel, "cli grpc") == "cli grpc"
        assert bearer(ALICE)  # the same token on both bindings
        server.stop()
    finally:
        server.kill()


def refused_start(*extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcplite", "serve", *serve_args(*extra)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(),
        timeout=PROCESS_WAIT,
        check=False,
    )


@pytest.fixture(scope="module")
def bad_files(folder: Path, pki: Pki, stranger: Pki) -> dict[str, tuple[list[str], str]]:
    """Each case: its arguments, and what the error must name (the culprit)."""
    garbage = folder / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    missing = str(folder / "no-such-file.pem")
    cert, key, junk = str(pki.certfile), str(pki.keyfile), str(garbage)
    other_key = str(stranger.keyfile)
    return {
        "missing certfile": (["--certfile", missing, "--keyfile", key], missing),
        "missing keyfile": (["--certfile", cert, "--keyfile", missing], missing),
        "garbage certfile": (["--certfile", junk, "--keyfile", key], junk),
        "key of another certificate": (["--certfile", cert, "--keyfile", other_key], other_key),
        "missing client CA": (
            ["--certfile", cert, "--keyfile", key, "--client-ca", missing],
            missing,
        ),
        "garbage client CA": (["--certfile", cert, "--keyfile", key, "--client-ca", junk], junk),
        "keyfile without certfile": (["--keyfile", key], "certfile"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing certfile",
        "missing keyfile",
        "garbage certfile",
        "key of another certificate",
        "missing client CA",
        "garbage client CA",
        "keyfile without certfile",
    ],
)
def test_the_server_refuses_to_start_with_certificate_files_it_cannot_use(
    bad_files: dict[str, tuple[list[str], str]], case: str
) -> None:
    """Exit status 2, no traceback, nothing served, and one line naming the file (or
    option) at fault, so that the operator knows which of three files to fix."""
    arguments, culprit = bad_files[case]
    done = refused_start(*arguments)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert "serving" not in done.stderr
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert last.startswith("mcplite: error:"), done.stderr
    assert culprit in last, last

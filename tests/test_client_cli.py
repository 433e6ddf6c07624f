"""``mcplite tools`` and ``mcplite call``, run as subprocesses against demo servers.

The command is ``python -m mcplite`` once mcplite/ops/cli.py has the client
subcommands, else ``python -m mcplite.client.cli`` (the same parser and code).
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import BASE, WAIT, RunningServer, start_server

from mcplite import Config

ROOT = Path(__file__).resolve().parent.parent


def _command() -> list[str]:
    from mcplite.ops.cli import build_parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            build_parser().parse_args(["tools", "http://127.0.0.1:1"])
    except SystemExit:
        return [sys.executable, "-m", "mcplite.client.cli"]
    return [sys.executable, "-m", "mcplite"]


COMMAND = _command()


def mcplite(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=2 * WAIT,
        check=False,
    )


def http_url(server: RunningServer) -> str:
    return f"http://127.0.0.1:{server.port}{BASE}"


@pytest.fixture
def url(demo_server: RunningServer) -> str:
    return http_url(demo_server)


@pytest.fixture
def promising_server() -> Iterator[RunningServer]:
    """The demo tools with a promise deadline of 0: analyze_dataset always promises."""
    from mcplite.demo import tools

    config = Config(secret=b"test-secret-0123456789abcdef", access_log=False, promise_after=0)
    server = start_server(tools, config)
    try:
        yield server
    finally:
        server.stop()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- tools ----------------------------------------------------------------------------


def test_tools_prints_a_table_of_names_types_descriptions_and_arguments(url: str) -> None:
    done = mcplite("tools", url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "DESCRIPTION", "ARGUMENTS"]
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert list(rows) == [
        "redeem",
        "cancel",
        "echo",
        "search_documents",
        "analyze_dataset",
        "generate_report",
    ]
    search = rows["search_documents"]
    assert " query " in search
    assert "Search through available documents." in search
    assert search.endswith("query*: string, limit: integer = 10")
    assert rows["analyze_dataset"].endswith(
        'dataset_id*: string, analysis_type: "quick"|"comprehensive" = "quick"'
    )
    assert rows["redeem"].endswith("promise*: string, wait: number = 0")
    assert lines[-1] == "(* required)"


def test_tools_over_grpc_prints_the_same_table_as_over_http() -> None:
    from mcplite.demo import tools

    server = start_server(tools, grpc=True)
    try:
        over_http = mcplite("tools", http_url(server))
        over_grpc = mcplite("tools", f"grpc://127.0.0.1:{server.grpc_port}")
    finally:
        server.stop()
    assert over_grpc.returncode == 0, over_grpc.stderr
    assert over_grpc.stdout == over_http.stdout


def test_tools_json_prints_the_definitions(url: str) -> None:
    done = mcplite("tools", url, "--json")
    assert done.returncode == 0, done.stderr
    definitions = json.loads(done.stdout)
    assert definitions[0]["name"] == "redeem"
    assert definitions[0]["@type"] == "system"
    assert definitions[2]["inputSchema"]["required"] == ["text"]


# --- call -----------------------------------------------------------------------------


def test_call_with_key_value_arguments_prints_the_answer(url: str) -> None:
    text = mcplite("call", url, "echo", "text=hello world")
    assert (text.returncode, text.stdout, text.stderr) == (0, "hello world\n", "")
    # A value is JSON where it parses: "5" in quotes is a string, 1 is a number.
    quoted = mcplite("call", url, "echo", 'text="5"')
    assert quoted.stdout == "5\n"
    found = mcplite("call", url, "search_documents", "query=MCP", "limit=1")
    assert found.returncode == 0, found.stderr
    item = json.loads(found.stdout)  # a structured item, as indented JSON
    assert set(item) == {"document_id", "title", "excerpt", "score"}


def test_call_with_json_arguments_merges_key_value_pairs_over_them(url: str) -> None:
    done = mcplite("call", url, "echo", "--json", '{"text": "from json"}')
    assert (done.returncode, done.stdout) == (0, "from json\n")
    over = mcplite("call", url, "echo", "--json", '{"text": "from json"}', "text=from pair")
    assert over.stdout == "from pair\n"


def test_call_with_stream_prints_the_parts_once_as_they_arrive(url: str) -> None:
    streamed = mcplite("call", url, "generate_report", "topic=quarterly results", "--stream")
    assert streamed.returncode == 0, streamed.stderr
    whole = mcplite("call", url, "generate_report", "topic=quarterly results")
    assert streamed.stdout == whole.stdout
    assert streamed.stdout.count("Executive Summary") == 1
    assert streamed.stdout.rstrip().endswith("We expect steady growth in the next quarter.")


def test_call_with_raw_prints_the_json_result(url: str) -> None:
    done = mcplite("call", url, "echo", "text=hi", "--raw")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["content"] == [{"type": "text", "text": "hi"}]
    assert result["_meta"]["response_type"] == "answer"


def test_call_with_no_wait_prints_the_token_which_redeem_turns_into_the_answer(
    promising_server: RunningServer,
) -> None:
    url = http_url(promising_server)
    promised = mcplite("call", url, "analyze_dataset", "dataset_id=sales", "--no-wait")
    assert promised.returncode == 0, promised.stderr
    token = promised.stdout.strip()
    assert token.startswith("prom_")
    assert "\n" not in token
    redeemed = mcplite("call", url, "redeem", f"promise={token}", f"wait={WAIT}")
    assert redeemed.returncode == 0, redeemed.stderr
    assert json.loads(redeemed.stdout)["dataset_id"] == "sales"


def test_call_without_no_wait_redeems_the_promise_itself(
    promising_server: RunningServer,
) -> None:
    done = mcplite("call", http_url(promising_server), "analyze_dataset", "dataset_id=sales")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["analysis_type"] == "quick"


# --- exit codes -----------------------------------------------------------------------


def test_a_failure_result_exits_1_with_its_message_on_stderr(url: str) -> None:
    done = mcplite("call", url, "analyze_dataset", "dataset_id=missing_x")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "dataset 'missing_x' does not exist" in done.stderr


def test_usage_mistakes_exit_2_with_one_line_errors(url: str) -> None:
    no_equals = mcplite("call", url, "echo", "text")
    assert no_equals.returncode == 2
    assert no_equals.stderr == "mcplite: error: expected KEY=VALUE, got 'text'\n"
    not_object = mcplite("call", url, "echo", "--json", "[1]")
    assert not_object.returncode == 2
    assert not_object.stderr.startswith("mcplite: error: --json must be a JSON object")
    bad_url = mcplite("call", "ftp://127.0.0.1/x", "echo")
    assert bad_url.returncode == 2
    assert bad_url.stderr.startswith("mcplite: error: unsupported URL")
    both = mcplite("call", url, "echo", "--stream", "--no-wait")
    assert both.returncode == 2


def test_a_refused_connection_exits_3() -> None:
    port = closed_port()
    for url in (f"http://127.0.0.1:{port}{BASE}", f"grpc://127.0.0.1:{port}"):
        done = mcplite("call", url, "echo", "text=x")
        assert done.returncode == 3
        assert done.stderr.startswith("mcplite: error: cannot connect to ")
        assert done.stderr.rstrip().endswith("Connection refused")
        assert done.stderr.count("\n") == 1


def test_an_unknown_tool_exits_4_with_the_suggestion(url: str) -> None:
    done = mcplite("call", url, "search_document", "query=x")
    assert done.returncode == 4
    assert done.stderr == (
        "mcplite: error: unknown tool 'search_document'. Did you mean 'search_documents'?\n"
    )


def test_invalid_arguments_exit_5_listing_each_field(url: str) -> None:
    done = mcplite("call", url, "search_documents", "limit=500")
    assert done.returncode == 5
    assert done.stderr.splitlines() == [
        "mcplite: error: invalid arguments for 'search_documents':",
        "  query: is required",
        "  limit: 500 is greater than the maximum of 100",
    ]


def test_other_protocol_errors_exit_6(url: str) -> None:
    done = mcplite("call", url, "redeem", "promise=prom_forged")
    assert done.returncode == 6
    assert done.stderr == "mcplite: error: invalid promise token (code -32602)\n"


def test_a_promise_without_an_outcome_in_time_exits_7_with_its_token(
    promising_server: RunningServer,
) -> None:
    done = mcplite(
        "call",
        http_url(promising_server),
        "analyze_dataset",
        "dataset_id=sales",
        "analysis_type=comprehensive",
        "--timeout",
        "0.3",
    )
    assert done.returncode == 7
    assert done.stderr.startswith("mcplite: error: no outcome of 'analyze_dataset' within 0.3 s")
    assert "prom_" in done.stderr


# --- prompts and resources --------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_lite() -> Iterator[Any]:
    """The demo with its prompts and resources (as ``mcplite serve mcplite.demo``)."""
    from test_prompts_lite import serving_demo

    with serving_demo() as server:
        yield server


def test_prompts_prints_each_prompt_with_its_arguments_over_http_and_grpc(
    demo_lite: Any,
) -> None:
    over_http = mcplite("prompts", demo_lite.http_url)
    assert over_http.returncode == 0, over_http.stderr
    lines = over_http.stdout.splitlines()
    assert lines[0].split() == ["NAME", "DESCRIPTION", "ARGUMENTS"]
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert set(rows) == {"explain_section", "ask_the_corpus"}
    assert "document_id*" in rows["explain_section"]
    assert lines[-1] == "(* required)"
    over_grpc = mcplite("prompts", demo_lite.grpc_url)
    assert over_grpc.returncode == 0, over_grpc.stderr
    assert over_grpc.stdout == over_http.stdout


def test_prompt_prints_the_messages_of_the_filled_in_prompt(demo_lite: Any) -> None:
    done = mcplite("prompt", demo_lite.http_url, "ask_the_corpus", "question=what is MCP?")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("[user]\n")
    assert "what is MCP?" in done.stdout
    as_json = mcplite("prompt", demo_lite.grpc_url, "ask_the_corpus", "question=42", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert "42" in json.loads(as_json.stdout)["messages"][0]["content"]["text"]


def test_an_unknown_prompt_or_a_missing_argument_exits_5(demo_lite: Any) -> None:
    unknown = mcplite("prompt", demo_lite.http_url, "nope")
    assert unknown.returncode == 5
    assert unknown.stderr == "mcplite: error: Unknown prompt: nope\n"
    missing = mcplite("prompt", demo_lite.grpc_url, "explain_section")
    assert missing.returncode == 5
    assert "document_id" in missing.stderr


def test_resources_lists_them_and_read_prints_a_resources_text(demo_lite: Any) -> None:
    listed = mcplite("resources", demo_lite.http_url, "--json")
    assert listed.returncode == 0, listed.stderr
    both = json.loads(listed.stdout)
    uri = both["resources"][0]["uri"]
    assert both["resourceTemplates"][0]["uriTemplate"]
    read = mcplite("read", demo_lite.http_url, uri)
    assert read.returncode == 0, read.stderr
    expected = demo_lite.rpc("resources/read", {"uri": uri})["result"]["contents"][0]["text"]
    assert read.stdout.rstrip("\n") == expected.rstrip("\n")


def test_reading_an_unknown_resource_exits_5_and_resources_over_grpc_exit_2(
    demo_lite: Any,
) -> None:
    unknown = mcplite("read", demo_lite.http_url, "mcplite-demo://nowhere")
    assert unknown.returncode == 5
    assert "mcplite-demo://nowhere" in unknown.stderr
    over_grpc = mcplite("resources", demo_lite.grpc_url)
    assert over_grpc.returncode == 2
    assert "http://" in over_grpc.stderr


def test_a_server_without_prompts_exits_6(url: str) -> None:
    done = mcplite("prompts", url)
    assert done.returncode == 6
    assert "(code -32601)" in done.stderr

"""Prompts (and resources) on the MCP-lite bindings, served for the demo.

HTTP: ``POST {base}/prompts`` lists the prompts in the spec 8.1 shape, and the
MCP-lite JSON-RPC endpoint answers MCP's ``prompts/*`` and ``resources/*``
methods with MCP's shapes and errors.  gRPC: ``GetPrompts`` and ``GetPrompt``,
called by a grpcio client built from our proto.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from conftest import BASE, RunningServer, rpc_message, start_server
from grpc_support import Protos, protos, to_python

from mcplite import demo
from mcplite.bindings.grpc.service import GrpcServer
from mcplite.bindings.http.server import HttpServer
from mcplite.client import Client, ClientError, InvalidArgumentsError, RPCError
from mcplite.client.sync import SyncClient


class LiteServer:
    """The demo's tools, prompts and resources on MCP-lite HTTP (and gRPC)."""

    def __init__(self, running: RunningServer, http: HttpServer, grpc_server: GrpcServer) -> None:
        self.running = running
        self.http = http
        self.grpc = grpc_server

    def post(self, path: str, payload: Any) -> tuple[int, bytes]:
        import http.client as httpclient

        conn = httpclient.HTTPConnection("127.0.0.1", self.http.port, timeout=5)
        try:
            body = json.dumps(payload).encode()
            conn.request(
                "POST", BASE + path, body=body, headers={"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def rpc(self, method: str, params: Any = None) -> dict[str, Any]:
        status, body = self.post("/rpc", rpc_message(method, params))
        assert status == 200, (status, body)
        reply: dict[str, Any] = json.loads(body)
        return reply

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http.port}{BASE}"

    @property
    def grpc_url(self) -> str:
        return f"grpc://127.0.0.1:{self.grpc.port}"


@contextmanager
def serving_demo() -> Iterator[LiteServer]:
    """The demo as ``mcplite serve mcplite.demo`` serves it: prompts and resources on
    MCP-lite HTTP and prompts on gRPC (and, on ``running``, the tools alone)."""
    running = start_server(demo.tools, grpc=True)

    async def boot() -> tuple[HttpServer, GrpcServer]:
        http = HttpServer(running.dispatcher, prompts=demo.prompts, resources=demo.resources)
        await http.start("127.0.0.1", 0)
        grpc_server = GrpcServer(running.dispatcher, prompts=demo.prompts)
        await grpc_server.start("127.0.0.1", 0)
        return http, grpc_server

    http, grpc_server = running.run(boot())
    try:
        yield LiteServer(running, http, grpc_server)
    finally:
        running.run(grpc_server.shutdown(0.0))
        running.run(http.shutdown(0.0))
        running.stop()


@pytest.fixture(scope="module")
def lite() -> Iterator[LiteServer]:
    with serving_demo() as server:
        yield server


# --- POST {base}/prompts --------------------------------------------------------------


def test_post_prompts_lists_each_prompt_with_its_name_description_and_arguments(
    lite: LiteServer,
) -> None:
    status, body = lite.post("/prompts", {})
    assert status == 200
    prompts = {p["name"]: p for p in json.loads(body)["prompts"]}
    assert set(prompts) == {"explain_section", "ask_the_corpus"}
    explain = prompts["explain_section"]
    assert explain["description"]
    names = [a["name"] for a in explain["arguments"]]
    assert "document_id" in names
    required = {a["name"]: a.get("required", False) for a in explain["arguments"]}
    assert required["document_id"] is True


def test_post_prompts_is_the_same_list_as_prompts_list_on_json_rpc(lite: LiteServer) -> None:
    _, body = lite.post("/prompts", None)
    assert json.loads(body) == lite.rpc("prompts/list")["result"]


def test_a_server_without_prompts_has_no_prompts_route_and_no_prompts_methods(
    lite: LiteServer,
) -> None:
    plain = lite.running  # the demo's tools only
    status, _, _ = plain.post("/prompts", {})
    assert status == 404
    assert plain.rpc("prompts/list")["error"]["code"] == -32601
    assert plain.rpc("resources/list")["error"]["code"] == -32601


# --- prompts/get on JSON-RPC ----------------------------------------------------------


def test_prompts_get_renders_the_prompt_as_mcp_messages(lite: LiteServer) -> None:
    reply = lite.rpc("prompts/get", {"name": "ask_the_corpus", "arguments": {"question": "why?"}})
    messages = reply["result"]["messages"]
    assert messages and messages[0]["role"] in ("user", "assistant")
    texts = [m["content"].get("text", "") for m in messages]
    assert any("why?" in t for t in texts)


def test_an_unknown_prompt_is_invalid_params_naming_it(lite: LiteServer) -> None:
    error = lite.rpc("prompts/get", {"name": "nope"})["error"]
    assert error["code"] == -32602
    assert error["message"] == "Unknown prompt: nope"
    assert error["data"] == {"name": "nope"}


def test_a_missing_required_argument_is_invalid_params(lite: LiteServer) -> None:
    error = lite.rpc("prompts/get", {"name": "explain_section", "arguments": {}})["error"]
    assert error["code"] == -32602
    assert "document_id" in error["message"]


@pytest.mark.parametrize(
    "params", [None, [], {"name": 3}, {"name": "ask_the_corpus", "arguments": [1]}]
)
def test_malformed_prompts_get_params_are_invalid_params(lite: LiteServer, params: Any) -> None:
    assert lite.rpc("prompts/get", params)["error"]["code"] == -32602


# --- resources on JSON-RPC ------------------------------------------------------------


def test_resources_list_templates_and_read_have_mcps_shapes(lite: LiteServer) -> None:
    listed = lite.rpc("resources/list")["result"]["resources"]
    assert listed and all({"uri", "name"} <= set(r) for r in listed)
    templates = lite.rpc("resources/templates/list")["result"]["resourceTemplates"]
    assert templates and all("uriTemplate" in t for t in templates)
    uri = listed[0]["uri"]
    contents = lite.rpc("resources/read", {"uri": uri})["result"]["contents"]
    assert contents[0]["uri"] == uri
    assert contents[0]["text"]


def test_reading_an_unknown_resource_is_the_mcp_not_found_error(lite: LiteServer) -> None:
    error = lite.rpc("resources/read", {"uri": "mcplite-demo://nowhere"})["error"]
    assert error["code"] == -32602
    assert error["data"]["uri"] == "mcplite-demo://nowhere"
    assert lite.rpc("resources/read", {})["error"]["code"] == -32602


def test_prompts_and_tools_share_the_endpoint_and_tools_still_answer(lite: LiteServer) -> None:
    reply = lite.rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    assert "result" in reply, reply


# --- gRPC: GetPrompts and GetPrompt, from a grpcio client built from our proto -----


def _unary(channel: grpc.Channel, proto: Protos, method: str, request: str, response: str) -> Any:
    return channel.unary_unary(
        f"/mcplite.MCPLite/{method}",
        request_serializer=proto.cls(request).SerializeToString,
        response_deserializer=proto.cls(response).FromString,
    )


@pytest.fixture
def channel(lite: LiteServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{lite.grpc.port}") as opened:
        yield opened


def test_get_prompts_lists_the_prompts_with_their_arguments(channel: grpc.Channel) -> None:
    ours = protos()["ours"]
    listed = _unary(channel, ours, "GetPrompts", "Empty", "PromptsList")(
        ours.cls("Empty")(), timeout=5
    )
    prompts = {p.name: p for p in listed.prompts}
    assert set(prompts) == {"explain_section", "ask_the_corpus"}
    explain = prompts["explain_section"]
    assert explain.description
    arguments = {a.name: a for a in explain.arguments}
    assert arguments["document_id"].required is True
    assert arguments["document_id"].description


def test_get_prompt_answers_the_same_messages_as_prompts_get_on_json_rpc(
    lite: LiteServer, channel: grpc.Channel
) -> None:
    ours = protos()["ours"]
    get = _unary(channel, ours, "GetPrompt", "GetPromptRequest", "GetPromptResponse")
    arguments = {"question": "what is MCP?"}
    answer = get(
        ours.cls("GetPromptRequest")(name="ask_the_corpus", arguments=arguments), timeout=5
    )
    expected = lite.rpc("prompts/get", {"name": "ask_the_corpus", "arguments": arguments})
    assert [to_python(m) for m in answer.messages] == expected["result"]["messages"]
    assert answer.description == expected["result"].get("description", "")


def test_get_prompt_of_an_unknown_prompt_is_not_found(channel: grpc.Channel) -> None:
    ours = protos()["ours"]
    get = _unary(channel, ours, "GetPrompt", "GetPromptRequest", "GetPromptResponse")
    with pytest.raises(grpc.RpcError) as caught:
        get(ours.cls("GetPromptRequest")(name="nope"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert caught.value.details() == "Unknown prompt: nope"
    trailers = dict(caught.value.trailing_metadata())
    assert json.loads(trailers["mcplite-error-data"]) == {"name": "nope"}


def test_get_prompt_without_a_required_argument_is_invalid_argument(
    channel: grpc.Channel,
) -> None:
    ours = protos()["ours"]
    get = _unary(channel, ours, "GetPrompt", "GetPromptRequest", "GetPromptResponse")
    with pytest.raises(grpc.RpcError) as caught:
        get(ours.cls("GetPromptRequest")(name="explain_section"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "document_id" in (caught.value.details() or "")


def test_a_client_from_the_spec_proto_still_lists_tools_beside_prompts(
    channel: grpc.Channel,
) -> None:
    spec = protos()["spec"]
    listed = spec.stub(channel).GetTools(spec.cls("Empty")(), timeout=5)
    assert "echo" in {t.name for t in listed.tools}


def test_a_grpc_server_without_prompts_answers_unimplemented(lite: LiteServer) -> None:
    ours = protos()["ours"]
    assert lite.running.grpc_port is not None  # the demo's tools only
    with grpc.insecure_channel(f"127.0.0.1:{lite.running.grpc_port}") as plain:
        get_prompts = _unary(plain, ours, "GetPrompts", "Empty", "PromptsList")
        with pytest.raises(grpc.RpcError) as caught:
            get_prompts(ours.cls("Empty")(), timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


# --- the client -----------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["http", "grpc"])
async def test_the_client_lists_and_gets_prompts_over_http_and_grpc(
    lite: LiteServer, transport: str
) -> None:
    url = lite.http_url if transport == "http" else lite.grpc_url
    async with Client(url, timeout=5) as client:
        prompts = await client.list_prompts()
        result = await client.get_prompt("ask_the_corpus", {"question": "what is MCP?"})
        with pytest.raises(InvalidArgumentsError) as unknown:
            await client.get_prompt("nope")
        with pytest.raises(InvalidArgumentsError):
            await client.get_prompt("explain_section", {})
    _, body = lite.post("/prompts", {})
    assert prompts == json.loads(body)["prompts"]  # the same objects on both transports
    expected = lite.rpc(
        "prompts/get", {"name": "ask_the_corpus", "arguments": {"question": "what is MCP?"}}
    )
    assert result == expected["result"]
    assert unknown.value.code == -32602
    assert unknown.value.message == "Unknown prompt: nope"


async def test_the_client_lists_and_reads_resources_over_http(lite: LiteServer) -> None:
    async with Client(lite.http_url, timeout=5) as client:
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        contents = await client.read_resource(resources[0]["uri"])
        with pytest.raises(InvalidArgumentsError) as unknown:
            await client.read_resource("mcplite-demo://nowhere")
    assert resources == lite.rpc("resources/list")["result"]["resources"]
    assert templates and "uriTemplate" in templates[0]
    assert contents[0]["uri"] == resources[0]["uri"] and contents[0]["text"]
    assert unknown.value.data["uri"] == "mcplite-demo://nowhere"


async def test_resources_over_grpc_are_a_client_error_naming_http(lite: LiteServer) -> None:
    async with Client(lite.grpc_url, timeout=5) as client:
        with pytest.raises(ClientError, match="http://"):
            await client.list_resources()


async def test_a_server_without_prompts_answers_method_not_found(lite: LiteServer) -> None:
    plain = lite.running
    async with Client(f"http://127.0.0.1:{plain.port}{BASE}", timeout=5) as client:
        with pytest.raises(RPCError) as caught:
            await client.list_prompts()
    assert caught.value.code == -32601


def test_the_sync_client_gets_prompts_and_reads_resources(lite: LiteServer) -> None:
    with SyncClient(lite.http_url, timeout=5) as client:
        assert {p["name"] for p in client.list_prompts()} == {"explain_section", "ask_the_corpus"}
        result = client.get_prompt("ask_the_corpus", {"question": "q"})
        assert result["messages"]
        uri = client.list_resources()[0]["uri"]
        assert client.read_resource(uri)[0]["uri"] == uri

"""The Gemini codec judged end to end by the ``google-genai`` SDK over loopback HTTP.

``GeminiStandIn`` is a few lines of HTTP around the package (path, key, decode, encode, errors,
model pages) standing in for the gateway's front door until the format is registered there: the
SDK's real requests are decoded by the codec, and the codec's answers are what the SDK parses.
Nothing is mocked: a scripted IR answer is what a translated upstream would have produced.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from pydantic import BaseModel

from modelgate import catalogue, errors, ir
from modelgate.formats.base import ClientRequest, Codec
from modelgate.formats.gemini import CODEC, models, paths
from modelgate.formats.gemini import response as gemini_response

AS_CODEC: Codec = CODEC
KEY = "gk-test-key"
Answer = ir.Response | list[ir.Event] | errors.GatewayError


@dataclass
class Seen:
    call: paths.Call
    body: dict[str, Any]
    request: ir.Request
    query: dict[str, str]


@dataclass
class GeminiStandIn:
    http: httpx.AsyncClient
    answers: list[Answer] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    listed: list[catalogue.Model] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        try:
            if paths.api_key({k.lower(): v for k, v in request.headers.items()}, query) != KEY:
                raise errors.AuthenticationFailed("API key not valid. Please pass a valid API key.")
            if request.method == "GET":
                return self._models(request.path, query)
            call = paths.parse_call(request.path)
            if call is None:
                raise errors.NotFound(f"no route for {request.path}")
            stream = paths.wants_stream(call.method, query)
            body = orjson.loads(await request.read())
            model = models.model_id(call.model)
            if call.method == "countTokens":
                counted = CODEC.decode_count_request(body, model=model)
                self.seen.append(Seen(call, body, counted, query))
                parts = sum(len(m.content) for m in counted.messages)
                return self._json(gemini_response.encode_count(7 * parts))
            decoded = CODEC.decode_request(body, model=model, stream=stream)
            self.seen.append(Seen(call, body, decoded, query))
            answer = self.answers.pop(0)
            if isinstance(answer, errors.GatewayError):
                raise answer
            client = ClientRequest(AS_CODEC, body, model, decoded)
            if isinstance(answer, list):
                return await self._stream(request, client, answer)
            # As the gateway's relay does with a translated answer: its own id, the client's model.
            answer.id, answer.model = CODEC.new_response_id(), model
            return self._json(CODEC.encode_response(answer, client))
        except errors.GatewayError as error:
            return web.Response(
                body=CODEC.render_error(error, "req_1"),
                status=CODEC.http_status(error),
                content_type="application/json",
            )

    def _models(self, path: str, query: dict[str, str]) -> web.Response:
        version, _, rest = path.strip("/").partition("/models")
        if version not in paths.API_VERSIONS:
            raise errors.NotFound(f"no route for {path}")
        if rest.startswith("/"):
            wanted = models.model_id(rest[1:])
            for model in self.listed:
                if model.id == wanted:
                    return self._json(models.model_object(model))
            raise errors.NotFound(f"models/{wanted} is not found")
        size = models.page_size(query.get("pageSize"))
        return self._json(models.models_page(self.listed, size, query.get("pageToken")))

    @staticmethod
    def _json(data: dict[str, Any]) -> web.Response:
        return web.Response(body=orjson.dumps(data), content_type="application/json")

    @staticmethod
    async def _stream(
        request: web.Request, client: ClientRequest, events: list[ir.Event]
    ) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(request)
        encoder = CODEC.stream_encoder(client)
        for event in events:
            if isinstance(event, ir.Start):  # as the gateway's translating stream does
                event.id, event.model = CODEC.new_response_id(), client.model
            await reply.write(encoder.encode(event) + encoder.ping())
        await reply.write_eof()
        return reply


@pytest.fixture
async def stand_in() -> AsyncIterator[GeminiStandIn]:
    http = httpx.AsyncClient()
    server = GeminiStandIn(http)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.url = f"http://127.0.0.1:{port}"
    yield server
    await http.aclose()
    await runner.cleanup()


def sdk_client(server: GeminiStandIn, version: str | None = "v1beta") -> genai.Client:
    # The SDK's own httpx transport (with aiohttp installed it would subclass aiohttp's session,
    # which aiohttp deprecates).
    options = types.HttpOptions(
        base_url=server.url, retry_options=types.HttpRetryOptions(attempts=1), httpx_async_client=server.http
    )
    if version is not None:
        options.api_version = version
    return genai.Client(api_key=KEY, http_options=options)


def text_answer(text: str, stop: ir.StopReason = ir.StopReason.END_TURN) -> ir.Response:
    return ir.Response(
        "resp_a", "ignored", [ir.TextPart(text)], stop, ir.Usage(input_tokens=12, output_tokens=4)
    )


def get_weather(city: str) -> str:
    """Returns the weather of a city.

    Args:
        city: The city's name.
    """
    return f"sunny in {city}"


class Recipe(BaseModel):
    name: str
    minutes: int


async def test_generate_content_request_and_answer(stand_in: GeminiStandIn) -> None:
    stand_in.answers.append(text_answer("Bonjour."))
    client = sdk_client(stand_in)
    config = types.GenerateContentConfig(
        system_instruction="Answer in French.",
        max_output_tokens=300,
        temperature=0.3,
        top_k=20,
        stop_sequences=["END"],
        thinking_config=types.ThinkingConfig(thinking_budget=2048),
        safety_settings=[
            types.SafetySetting(
                category=types.HarmCategory.HARM_CATEGORY_HARASSMENT,
                threshold=types.HarmBlockThreshold.BLOCK_NONE,
            )
        ],
        response_mime_type="application/json",
        response_schema=Recipe,
    )
    result = await client.aio.models.generate_content(model="aria-large", contents="Hello", config=config)
    assert result.text == "Bonjour."
    assert result.usage_metadata and result.usage_metadata.total_token_count == 16
    assert result.model_version == "aria-large"
    seen = stand_in.seen[0]
    assert seen.call == paths.Call("v1beta", "aria-large", "generateContent")
    req = seen.request
    assert (req.model, req.stream, req.max_tokens, req.temperature, req.top_k) == (
        "aria-large",
        False,
        300,
        0.3,
        20,
    )
    assert req.system == ["Answer in French."] and req.stop_sequences == ["END"]
    assert req.messages == [ir.Message("user", [ir.TextPart("Hello")])]
    assert req.reasoning_effort == "low"
    assert req.response_format is not None and req.response_format["type"] == "json_schema"
    schema = req.response_format["schema"]
    assert schema["type"] == "object" and set(schema["properties"]) == {"name", "minutes"}
    assert schema["properties"]["minutes"]["type"] == "integer"


async def test_sdk_bytes_arrive_as_standard_base64(stand_in: GeminiStandIn) -> None:
    stand_in.answers.append(text_answer("A red square."))
    image, pdf = b"\x89PNG\xfb\xff\xfe", b"%PDF-1.4\xfb\xef"
    contents = [
        types.Part.from_bytes(data=image, mime_type="image/png"),
        types.Part.from_bytes(data=pdf, mime_type="application/pdf"),
        "Describe.",
    ]
    await sdk_client(stand_in).aio.models.generate_content(model="aria-large", contents=contents)
    assert stand_in.seen[0].request.messages[0].content == [
        ir.ImagePart(media_type="image/png", data=base64.b64encode(image).decode()),
        ir.DocumentPart(media_type="application/pdf", data=base64.b64encode(pdf).decode()),
        ir.TextPart("Describe."),
    ]


async def test_sdk_tools_and_tool_config(stand_in: GeminiStandIn) -> None:
    stand_in.answers.append(text_answer("ok"))
    declaration = types.FunctionDeclaration(
        name="lookup",
        description="Looks a word up.",
        parameters_json_schema={"type": "object", "properties": {"word": {"type": "string"}}},
    )
    config = types.GenerateContentConfig(
        tools=[
            types.Tool(function_declarations=[declaration]),
            get_weather,
            types.Tool(google_search=types.GoogleSearch()),
            types.Tool(code_execution=types.ToolCodeExecution()),
        ],
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["lookup"]
            )
        ),
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    await sdk_client(stand_in).aio.models.generate_content(model="aria-large", contents="hi", config=config)
    req = stand_in.seen[0].request
    assert req.tool_choice == ir.ToolChoice("tool", "lookup")
    assert req.tools == [
        ir.Tool("lookup", "Looks a word up.", {"type": "object", "properties": {"word": {"type": "string"}}})
    ]
    assert req.web_search is not None and req.web_search.client_type == "googleSearch"
    assert req.hosted_tools == ["codeExecution"]


async def test_default_api_version_with_a_base_url_is_v1(stand_in: GeminiStandIn) -> None:
    stand_in.answers.append(text_answer("ok"))
    result = await sdk_client(stand_in, version=None).aio.models.generate_content(
        model="aria-large", contents="hi"
    )
    assert result.text == "ok" and stand_in.seen[0].call.version == "v1"


async def test_stream_with_function_call(stand_in: GeminiStandIn) -> None:
    stand_in.answers.append(
        [
            ir.Start("x", "y", ir.Usage()),
            ir.BlockStart(0, "text"),
            ir.TextDelta(0, "Let me "),
            ir.TextDelta(0, "check."),
            ir.BlockStop(0),
            ir.BlockStart(1, "tool_use", tool_id="toolu_9", tool_name="get_weather"),
            ir.ToolArgsDelta(1, '{"city":'),
            ir.ToolArgsDelta(1, '"Paris"}'),
            ir.BlockStop(1),
            ir.Finish(ir.StopReason.TOOL_USE, ir.Usage(input_tokens=20, output_tokens=9)),
        ]
    )
    client = sdk_client(stand_in)
    config = types.GenerateContentConfig(
        tools=[get_weather], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )
    chunks = [
        c
        async for c in await client.aio.models.generate_content_stream(
            model="aria-large", contents="weather?", config=config
        )
    ]
    assert "".join(c.text or "" for c in chunks if not c.function_calls) == "Let me check."
    calls = [call for c in chunks for call in c.function_calls or []]
    assert [(c.id, c.name, c.args) for c in calls] == [("toolu_9", "get_weather", {"city": "Paris"})]
    final = chunks[-1]
    assert {c.model_version for c in chunks} == {"aria-large"} and len({c.response_id for c in chunks}) == 1
    assert final.candidates and final.candidates[0].finish_reason == types.FinishReason.STOP
    assert final.usage_metadata and final.usage_metadata.prompt_token_count == 20
    seen = stand_in.seen[0]
    assert seen.call.method == "streamGenerateContent" and seen.query.get("alt") == "sse"
    assert seen.request.stream is True
    assert [t.name for t in seen.request.tools] == ["get_weather"]
    assert seen.request.tools[0].input_schema["properties"]["city"]["type"] == "string"


async def test_automatic_function_calling_loop_and_thought_signatures(stand_in: GeminiStandIn) -> None:
    """The SDK runs the function itself and sends its result back: the second request answers
    the first answer's call by id, and the thought signature comes back as it was given."""
    signature = "EqMBCkYIBxgCKkD+anthropic/sig=="
    stand_in.answers += [
        ir.Response(
            "r1",
            "m",
            [
                ir.ThinkingPart("Need weather.", signature),
                ir.ToolUsePart("toolu_7", "get_weather", {"city": "Lyon"}),
            ],
            ir.StopReason.TOOL_USE,
            ir.Usage(input_tokens=5, output_tokens=5),
        ),
        text_answer("It is sunny in Lyon."),
    ]
    client = sdk_client(stand_in)
    config = types.GenerateContentConfig(
        tools=[get_weather],
        thinking_config=types.ThinkingConfig(include_thoughts=True),
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(mode=types.FunctionCallingConfigMode.AUTO)
        ),
    )
    chat = client.aio.chats.create(model="aria-large", config=config)
    reply = await chat.send_message("Weather in Lyon?")
    assert reply.text == "It is sunny in Lyon."
    second = stand_in.seen[1].request
    assert second.tool_choice == ir.ToolChoice("auto")
    model_turn, result_turn = second.messages[1], second.messages[2]
    assert model_turn.role == "assistant"
    assert model_turn.content == [
        ir.ThinkingPart("Need weather.", signature),
        ir.ToolUsePart("toolu_7", "get_weather", {"city": "Lyon"}),
    ]
    result = result_turn.content[0]
    assert isinstance(result, ir.ToolResultPart) and result.tool_use_id == "toolu_7"
    assert result.content == [ir.TextPart('{"result":"sunny in Lyon"}')]
    # The chat session kept the whole exchange as valid history.
    assert len(chat.get_history()) == 4


async def test_streamed_chat_sends_its_thoughts_back_whole(stand_in: GeminiStandIn) -> None:
    """A chat session keeps a streamed answer as its chunks' parts; the next request gives the
    upstream the thinking block whole, with its signature."""
    signature = "EqMBCkYIBxgCKkD+anthropic/sig=="
    stand_in.answers += [
        [
            ir.Start("x", "y", ir.Usage()),
            ir.BlockStart(0, "thinking"),
            ir.ThinkingDelta(0, "Let me "),
            ir.ThinkingDelta(0, "think."),
            ir.SignatureDelta(0, signature),
            ir.BlockStop(0),
            ir.BlockStart(1, "text"),
            ir.TextDelta(1, "Four."),
            ir.BlockStop(1),
            ir.Finish(ir.StopReason.END_TURN, ir.Usage(input_tokens=3, output_tokens=8, reasoning_tokens=5)),
        ],
        text_answer("Five."),
    ]
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(include_thoughts=True))
    chat = sdk_client(stand_in).aio.chats.create(model="aria-large", config=config)
    first = [c async for c in await chat.send_message_stream("2+2?")]
    assert "".join(c.text or "" for c in first) == "Four."
    await chat.send_message("And 2+3?")
    history = stand_in.seen[1].request.messages
    assert [m.role for m in history] == ["user", "assistant", "user"]
    assert history[1].content == [
        ir.ThinkingPart("Let me think.", signature),
        ir.TextPart("Four."),
        ir.TextPart(""),
    ]


async def test_count_tokens(stand_in: GeminiStandIn) -> None:
    client = sdk_client(stand_in)
    counted = await client.aio.models.count_tokens(model="aria-large", contents=["one", "two"])
    assert counted.total_tokens == 14
    assert stand_in.seen[0].call.method == "countTokens"


@pytest.mark.parametrize(
    ("error", "kind", "code", "status"),
    [
        (errors.InvalidRequest("bad field"), genai_errors.ClientError, 400, "INVALID_ARGUMENT"),
        (errors.BillingRefused("balance too low"), genai_errors.ClientError, 402, "FAILED_PRECONDITION"),
        (errors.RateLimited("slow down"), genai_errors.ClientError, 429, "RESOURCE_EXHAUSTED"),
        (errors.Overloaded("busy"), genai_errors.ServerError, 503, "UNAVAILABLE"),
    ],
)
async def test_errors_reach_the_sdk_as_api_errors(
    stand_in: GeminiStandIn,
    error: errors.GatewayError,
    kind: type[genai_errors.APIError],
    code: int,
    status: str,
) -> None:
    stand_in.answers.append(error)
    with pytest.raises(kind) as info:
        await sdk_client(stand_in).aio.models.generate_content(model="aria-large", contents="hi")
    assert (info.value.code, info.value.status, info.value.message) == (code, status, error.message)


async def test_refused_request_and_wrong_key(stand_in: GeminiStandIn) -> None:
    client = sdk_client(stand_in)
    with pytest.raises(genai_errors.ClientError) as info:
        await client.aio.models.generate_content(
            model="aria-large", contents="hi", config=types.GenerateContentConfig(candidate_count=2)
        )
    assert info.value.code == 400 and "only 1 candidate" in (info.value.message or "")
    options = types.HttpOptions(base_url=stand_in.url, api_version="v1beta", httpx_async_client=stand_in.http)
    wrong = genai.Client(api_key="nope", http_options=options)
    with pytest.raises(genai_errors.ClientError) as denied:
        await wrong.aio.models.generate_content(model="aria-large", contents="hi")
    assert (denied.value.code, denied.value.status) == (401, "UNAUTHENTICATED")


async def test_error_in_the_middle_of_a_stream(stand_in: GeminiStandIn) -> None:
    stand_in.answers.append(
        [
            ir.Start("x", "y", ir.Usage()),
            ir.BlockStart(0, "text"),
            ir.TextDelta(0, "Part"),
            ir.StreamError("overloaded", "the upstream is overloaded"),
        ]
    )
    received: list[str] = []
    with pytest.raises(genai_errors.APIError) as info:
        async for chunk in await sdk_client(stand_in).aio.models.generate_content_stream(
            model="aria-large", contents="hi"
        ):
            received.append(chunk.text or "")
    assert received == ["Part"]
    assert (info.value.code, info.value.status) == (503, "UNAVAILABLE")


async def test_model_list_and_get(stand_in: GeminiStandIn) -> None:
    price = catalogue.Price(input=1, output=2, cache_write=1, cache_read=1)
    stand_in.listed = [
        catalogue.Model(f"aria-{i}", "aria", f"Aria {i}", 1_700_000_000, price, 100_000, 4096, 4096)
        for i in range(5)
    ]
    client = sdk_client(stand_in)
    listed = [m async for m in await client.aio.models.list(config={"page_size": 2})]
    assert [m.name for m in listed] == [f"models/aria-{i}" for i in range(5)]
    first = listed[0]
    assert (first.display_name, first.input_token_limit, first.output_token_limit) == (
        "Aria 0",
        100_000,
        4096,
    )
    assert first.supported_actions == ["generateContent", "streamGenerateContent", "countTokens"]
    got = await client.aio.models.get(model="aria-3")
    assert got.name == "models/aria-3"
    with pytest.raises(genai_errors.ClientError) as info:
        await client.aio.models.get(model="nova-9")
    assert (info.value.code, info.value.status) == (404, "NOT_FOUND")


async def test_stream_without_alt_sse_is_a_clear_400(stand_in: GeminiStandIn) -> None:
    async with httpx.AsyncClient(base_url=stand_in.url) as http:
        reply = await http.post(
            "/v1beta/models/aria-large:streamGenerateContent",
            params={"key": KEY},
            json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        )
    assert reply.status_code == 400
    assert reply.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "alt=sse" in reply.json()["error"]["message"]

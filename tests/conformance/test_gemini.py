"""The Gemini API through the real gateway, judged by the ``google-genai`` SDK.

Each client request is translated to the upstream's dialect (the wired gateway's fakes speak
Messages, Chat and Responses on loopback; see conftest): generation, streams, function calling
both ways, counts, the model list, usage billed in the ledger, and every refusal in Google's
shape (``{"error": {"code", "message", "status"}}``), with the key sent as ``x-goog-api-key``
(what the SDK sends) or as ``?key=``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import httpx
import orjson
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests.conformance.conftest import Wired, issue_key, usage_records
from tests.fakes.upstream import Fault, Reply
from tests.gateway_server import running_gateway

WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city.",
    parameters_json_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
NO_AUTO = types.AutomaticFunctionCallingConfig(disable=True)
HELLO = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}


class Gemini(Protocol):
    def __call__(self, secret: str, version: str | None = "v1beta") -> genai.Client: ...


@pytest.fixture
def gemini(wired: Wired) -> Iterator[Gemini]:
    """``gemini(secret, version=...)``: a google-genai client on the wired gateway (no retries),
    closed when the test ends."""
    made: list[genai.Client] = []

    def client(secret: str, version: str | None = "v1beta") -> genai.Client:
        options = types.HttpOptions(base_url=wired.gateway.base_url, api_version=version)
        made.append(genai.Client(api_key=secret, http_options=options))
        return made[-1]

    yield client
    for c in made:
        c.close()


def balance(wired: Wired, account_id: int) -> tuple[int, int]:
    account = wired.gateway.call(wired.gateway.services.accounts.get_account(account_id))
    assert account is not None
    return account.balance_uc, account.reserved_uc


def google_error(response: httpx.Response, code: int, status: str) -> str:
    """The refusal's message, once its shape is Google's exactly."""
    assert response.status_code == code and response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and {"code", "message", "status"} <= set(body["error"])
    assert (body["error"]["code"], body["error"]["status"]) == (code, status)
    message: str = body["error"]["message"]
    return message


# --- generation, translated to each dialect -------------------------------------------------


def test_generate_is_translated_to_messages_and_billed(wired: Wired, gemini: Gemini) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    wired.script.reset(Reply(text="Sunny in Paris.", input_tokens=30, output_tokens=9))
    result = gemini(secret).models.generate_content(
        model="aria-haiku-4.5",
        contents="Weather in Paris?",
        config=types.GenerateContentConfig(
            system_instruction="Be brief.", max_output_tokens=200, temperature=0.5, stop_sequences=["END"]
        ),
    )
    assert result.text == "Sunny in Paris."
    assert result.model_version == "aria-haiku-4.5"
    assert result.candidates and result.candidates[0].finish_reason == types.FinishReason.STOP
    usage = result.usage_metadata
    assert usage is not None and (usage.prompt_token_count, usage.candidates_token_count) == (30, 9)
    assert usage.total_token_count == 39
    sent = wired.fake.requests[-1]
    assert sent.path == "/v1/messages"
    body = sent.json()
    assert body["model"] == "claude-haiku-4-5" and body["max_tokens"] == 200
    assert body["system"] == [{"type": "text", "text": "Be brief."}]
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}]
    assert body["stop_sequences"] == ["END"] and body["temperature"] == 0.5 and "stream" not in body
    (record,) = usage_records(wired.gateway, key_id)
    assert record.endpoint == "generate_content" and record.model == "aria-haiku-4.5"
    assert (record.input_tokens, record.output_tokens) == (30, 9)
    assert record.status == "ok" and record.charged_uc > 0
    assert balance(wired, record.account_id) == (100_000_000 - record.charged_uc, 0)


def test_stream_is_translated_to_chat_and_billed(wired: Wired, gemini: Gemini) -> None:
    secret, key_id = issue_key(wired.gateway, "Basic")
    wired.script.reset(Reply(text="one two three four", chunks=4, input_tokens=21, output_tokens=5))
    chunks = list(
        gemini(secret, version="v1").models.generate_content_stream(
            model="aria-sonnet-4.6", contents="Count."
        )
    )
    assert "".join(c.text or "" for c in chunks) == "one two three four"
    assert {c.model_version for c in chunks} == {"aria-sonnet-4.6"} and len(
        {c.response_id for c in chunks}
    ) == 1
    final = chunks[-1]
    assert final.candidates and final.candidates[0].finish_reason == types.FinishReason.STOP
    assert final.usage_metadata and final.usage_metadata.prompt_token_count == 21
    assert final.usage_metadata.candidates_token_count == 5
    sent = wired.fake.requests[-1]
    assert sent.path == "/v1/chat/completions"
    body = sent.json()
    assert body["model"] == "llama-3.3-70b" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    (record,) = usage_records(wired.gateway, key_id)
    assert record.endpoint == "generate_content" and record.charged_uc > 0
    assert (record.input_tokens, record.output_tokens) == (21, 5)
    assert balance(wired, record.account_id) == (100_000_000 - record.charged_uc, 0)


def test_a_google_search_goes_to_a_responses_upstream(wired: Wired, gemini: Gemini) -> None:
    """An OpenAI upstream speaks Chat and Responses; a request offering Google Search goes to the
    dialect that runs a web search (Responses)."""
    secret, key_id = issue_key(wired.gateway, "Nova")
    wired.script.reset(Reply(text="Found it.", input_tokens=40, output_tokens=6, web_search_requests=1))
    result = gemini(secret).models.generate_content(
        model="nova-5.5",
        contents="Latest news?",
        config=types.GenerateContentConfig(tools=[types.Tool(google_search=types.GoogleSearch())]),
    )
    assert result.text is not None and "Found it." in result.text
    sent = wired.fake.requests[-1]
    assert sent.path == "/v1/responses"
    body = sent.json()
    assert body["model"] == "gpt-5.5-2026" and [t["type"] for t in body["tools"]] == ["web_search"]
    (record,) = usage_records(wired.gateway, key_id)
    assert (record.input_tokens, record.output_tokens, record.web_search_requests) == (40, 6, 1)
    assert record.charged_uc > 0


def test_function_calling_round_trip_through_chat(wired: Wired, gemini: Gemini) -> None:
    secret, key_id = issue_key(wired.gateway, "Nova")
    client = gemini(secret)
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])], automatic_function_calling=NO_AUTO
    )
    wired.script.reset(Reply.tool_call("get_weather", {"city": "Paris"}, input_tokens=25, output_tokens=8))
    first = client.models.generate_content(model="nova-5.5", contents="Weather in Paris?", config=config)
    assert first.function_calls is not None
    (call,) = first.function_calls
    assert (call.name, call.args) == ("get_weather", {"city": "Paris"}) and call.id
    sent = wired.fake.requests[-1].json()
    assert wired.fake.requests[-1].path == "/v1/chat/completions"
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER.parameters_json_schema,
            },
        }
    ]
    # The second turn answers the call; the upstream sees the call and its result paired by id.
    wired.script.reset(Reply(text="It is 12 C in Paris."))
    assert first.candidates and first.candidates[0].content
    history = [
        types.Content(role="user", parts=[types.Part.from_text(text="Weather in Paris?")]),
        first.candidates[0].content,
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id=call.id, name="get_weather", response={"temp": "12 C"}
                    )
                )
            ],
        ),
    ]
    second = client.models.generate_content(model="nova-5.5", contents=history, config=config)
    assert second.text == "It is 12 C in Paris."
    messages = wired.fake.requests[-1].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    (tool_call,) = messages[1]["tool_calls"]
    assert tool_call["function"]["name"] == "get_weather"
    assert orjson.loads(tool_call["function"]["arguments"]) == {"city": "Paris"}
    assert messages[2]["tool_call_id"] == tool_call["id"] == call.id
    assert "12 C" in str(messages[2]["content"])
    records = usage_records(wired.gateway, key_id, count=2)
    assert [r.status for r in records] == ["ok", "ok"] and all(r.charged_uc > 0 for r in records)


def test_a_streamed_function_call_through_messages(wired: Wired, gemini: Gemini) -> None:
    secret, _ = issue_key(wired.gateway, "Pro")
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])], automatic_function_calling=NO_AUTO
    )
    wired.script.reset(Reply.tool_call("get_weather", {"city": "Oslo"}, text="Checking."))
    chunks = list(
        gemini(secret).models.generate_content_stream(model="aria-haiku-4.5", contents="Oslo?", config=config)
    )
    calls = [c for chunk in chunks for c in chunk.function_calls or []]
    assert [(c.name, c.args) for c in calls] == [("get_weather", {"city": "Oslo"})]
    assert "".join(c.text or "" for c in chunks if not c.function_calls) == "Checking."
    assert wired.fake.requests[-1].path == "/v1/messages" and wired.fake.requests[-1].json()["stream"] is True


# --- the key as ?key= ------------------------------------------------------------------------


def test_the_key_as_a_query_parameter(wired: Wired) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    base = wired.gateway.base_url
    wired.script.reset(Reply(text="Hi there."), Reply(text="Hi again.", chunks=2))
    with httpx.Client(base_url=base, timeout=30) as http:
        whole = http.post(f"/v1beta/models/aria-haiku-4.5:generateContent?key={secret}", json=HELLO)
        assert whole.status_code == 200
        assert whole.json()["candidates"][0]["content"]["parts"] == [{"text": "Hi there."}]
        streamed = http.post(
            f"/v1/models/aria-haiku-4.5:streamGenerateContent?alt=sse&key={secret}", json=HELLO
        )
        assert streamed.status_code == 200 and streamed.headers["content-type"].startswith(
            "text/event-stream"
        )
        events = [orjson.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert (
            "".join(p["text"] for e in events for p in e["candidates"][0]["content"].get("parts", []))
            == "Hi again."
        )
        # Without alt=sse Google streams one JSON array; this gateway answers a clear 400 instead.
        no_sse = http.post(f"/v1beta/models/aria-haiku-4.5:streamGenerateContent?key={secret}", json=HELLO)
        assert "alt=sse" in google_error(no_sse, 400, "INVALID_ARGUMENT")
        # The header wins over the query parameter, as for Google.
        both = http.post(
            "/v1beta/models/aria-haiku-4.5:countTokens?key=sk-cs4-notakey",
            json=HELLO,
            headers={"x-goog-api-key": secret},
        )
        assert both.status_code == 200
    assert len(wired.fake.requests) == 2
    records = usage_records(wired.gateway, key_id, count=2)
    assert [r.status for r in records] == ["ok", "ok"]


# --- counting --------------------------------------------------------------------------------


def test_count_tokens_answers_total_tokens_and_spends_nothing(wired: Wired, gemini: Gemini) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    client = gemini(secret)
    short = client.models.count_tokens(model="aria-haiku-4.5", contents="hello")
    long = client.models.count_tokens(model="aria-haiku-4.5", contents="hello " * 200)
    assert short.total_tokens is not None and long.total_tokens is not None
    assert 0 < short.total_tokens < long.total_tokens
    with httpx.Client(base_url=wired.gateway.base_url, timeout=30) as http:
        wrapped = http.post(
            "/v1/models/aria-haiku-4.5:countTokens",
            json={"generateContentRequest": {"model": "models/aria-haiku-4.5", **HELLO}},
            headers={"x-goog-api-key": secret},
        )
    assert wrapped.status_code == 200 and wrapped.json() == {"totalTokens": short.total_tokens}
    assert wired.fake.count == 0
    account = wired.gateway.call(wired.gateway.services.key_records.get_key(key_id))
    assert account is not None
    assert balance(wired, account.account_id) == (100_000_000, 0)
    assert all(r.charged_uc == 0 for r in usage_records(wired.gateway, key_id, count=0, timeout=0))


# --- the model list --------------------------------------------------------------------------


def test_the_model_list_in_googles_shape_per_key(wired: Wired, gemini: Gemini) -> None:
    pro, _ = issue_key(wired.gateway, "Pro")
    nova, _ = issue_key(wired.gateway, "Nova")
    aria_names = {m.name for m in gemini(pro).models.list()}
    nova_names = {m.name for m in gemini(nova, version="v1").models.list(config={"page_size": 2})}
    assert aria_names and all(n is not None and n.startswith("models/aria-") for n in aria_names)
    assert nova_names and all(n is not None and n.startswith("models/nova-") for n in nova_names)
    one = gemini(pro).models.get(model="aria-haiku-4.5")
    assert one.name == "models/aria-haiku-4.5" and one.output_token_limit
    assert one.supported_actions == ["generateContent", "streamGenerateContent", "countTokens"]
    with pytest.raises(genai_errors.ClientError) as refused:
        gemini(pro).models.get(model="nova-5.5")
    assert (refused.value.code, refused.value.status) == (404, "NOT_FOUND")
    with httpx.Client(base_url=wired.gateway.base_url, timeout=30) as http:
        # /v1/models is shared: Google's shape only for a Gemini client's key.
        by_header = http.get("/v1/models", headers={"x-goog-api-key": pro}).json()
        by_query = http.get(f"/v1/models?key={pro}").json()
        openai_shape = http.get("/v1/models", headers={"authorization": f"Bearer {pro}"}).json()
        single = http.get(f"/v1/models/aria-haiku-4.5?key={pro}").json()
        paged = http.get("/v1beta/models?pageSize=1", headers={"x-goog-api-key": pro}).json()
        bad_page = http.get("/v1beta/models?pageToken=nonsense", headers={"x-goog-api-key": pro})
        # Digits int() refuses: "²" as the size, "o²" (base64 b8Ky) as the token.
        odd_size = http.get("/v1beta/models?pageSize=%C2%B2", headers={"x-goog-api-key": pro})
        odd_token = http.get("/v1beta/models?pageToken=b8Ky", headers={"x-goog-api-key": pro})
    assert {m["name"] for m in by_header["models"]} == aria_names
    assert by_query == by_header
    assert (
        openai_shape["object"] == "list" and {f"models/{m['id']}" for m in openai_shape["data"]} == aria_names
    )
    assert single["name"] == "models/aria-haiku-4.5"
    assert len(paged["models"]) == 1 and paged["nextPageToken"]
    assert "pageToken" in google_error(bad_page, 400, "INVALID_ARGUMENT")
    assert "pageSize" in google_error(odd_size, 400, "INVALID_ARGUMENT")
    assert "pageToken" in google_error(odd_token, 400, "INVALID_ARGUMENT")


def test_the_model_list_follows_the_keys_allowed_models(wired: Wired, gemini: Gemini) -> None:
    account = wired.gateway.account("gemini-allowed", 10)
    issued = wired.gateway.key(account, "Pro", rpm=1000, models=["aria-haiku-4.5"])
    assert [m.name for m in gemini(issued.secret).models.list()] == ["models/aria-haiku-4.5"]
    with pytest.raises(genai_errors.ClientError) as refused:
        gemini(issued.secret).models.generate_content(model="aria-sonnet-4.6", contents="hi")
    assert (refused.value.code, refused.value.status) == (404, "NOT_FOUND")
    assert wired.fake.count == 0


# --- refusals --------------------------------------------------------------------------------


def test_refusals_are_in_googles_shape(wired: Wired, gemini: Gemini) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    base = wired.gateway.base_url
    with pytest.raises(genai_errors.ClientError) as bad_key:
        gemini("sk-cs4-" + "A" * 38).models.generate_content(model="aria-haiku-4.5", contents="hi")
    assert (bad_key.value.code, bad_key.value.status) == (401, "UNAUTHENTICATED")
    with pytest.raises(genai_errors.ClientError) as other_family:
        gemini(secret).models.generate_content(model="nova-5.5", contents="hi")
    assert (other_family.value.code, other_family.value.status) == (404, "NOT_FOUND")
    assert "nova-5.5" in (other_family.value.message or "")
    with pytest.raises(genai_errors.ClientError) as unknown:
        gemini(secret).models.generate_content_stream(model="no-such-model", contents="hi").__next__()
    assert (unknown.value.code, unknown.value.status) == (404, "NOT_FOUND")
    with httpx.Client(base_url=base, timeout=30) as http:
        missing = http.post("/v1beta/models/aria-haiku-4.5:generateContent", json=HELLO)
        assert "x-goog-api-key" in google_error(missing, 401, "UNAUTHENTICATED")
        key = {"x-goog-api-key": secret}
        bad_json = http.post("/v1beta/models/aria-haiku-4.5:generateContent", content=b"{nope", headers=key)
        google_error(bad_json, 400, "INVALID_ARGUMENT")
        no_contents = http.post("/v1beta/models/aria-haiku-4.5:generateContent", json={}, headers=key)
        assert "contents" in google_error(no_contents, 400, "INVALID_ARGUMENT")
        no_method = http.post("/v1beta/models/aria-haiku-4.5:embedContent", json=HELLO, headers=key)
        google_error(no_method, 404, "NOT_FOUND")
        wrong_verb = http.get("/v1beta/models/aria-haiku-4.5:generateContent", headers=key)
        google_error(wrong_verb, 405, "UNIMPLEMENTED")
        unknown_v1 = http.get(f"/v1/files?key={secret}")
        google_error(unknown_v1, 404, "NOT_FOUND")
    assert wired.fake.count == 0
    # The refusals of a known key are recorded at 0 µc; nothing was charged.
    account = wired.gateway.call(wired.gateway.services.key_records.get_key(key_id))
    assert account is not None and balance(wired, account.account_id) == (100_000_000, 0)


def test_an_upstream_permission_refusal_is_relayed_as_403(wired: Wired, gemini: Gemini) -> None:
    secret, key_id = issue_key(wired.gateway, "Pro")
    wired.script.reset(
        Fault.status(403, message="this request is not permitted", error_type="permission_error")
    )
    with pytest.raises(genai_errors.ClientError) as refused:
        gemini(secret).models.generate_content(model="aria-haiku-4.5", contents="hi")
    assert (refused.value.code, refused.value.status) == (403, "PERMISSION_DENIED")
    (record,) = usage_records(wired.gateway, key_id)
    assert record.charged_uc == 0
    assert balance(wired, record.account_id) == (100_000_000, 0)


def test_rate_limit_and_spend_refusals(wired: Wired, gemini: Gemini) -> None:
    account = wired.gateway.account("gemini-limited", 100)
    limited = wired.gateway.key(account, "Pro", rpm=1)
    wired.script.reset(Reply(text="once"))
    client = gemini(limited.secret)
    assert client.models.generate_content(model="aria-haiku-4.5", contents="hi").text == "once"
    with pytest.raises(genai_errors.ClientError) as too_many:
        client.models.generate_content(model="aria-haiku-4.5", contents="hi")
    assert (too_many.value.code, too_many.value.status) == (429, "RESOURCE_EXHAUSTED")
    assert too_many.value.response is not None and "retry-after" in too_many.value.response.headers
    poor = wired.gateway.account("gemini-poor", 0.000001)
    broke = wired.gateway.key(poor, "Pro", rpm=100)
    with pytest.raises(genai_errors.ClientError) as no_credit:
        gemini(broke.secret).models.generate_content(model="aria-haiku-4.5", contents="hi")
    assert (no_credit.value.code, no_credit.value.status) == (402, "FAILED_PRECONDITION")
    capped = wired.gateway.key(account, "Pro", rpm=100, monthly_cap_uc=1)
    with pytest.raises(genai_errors.ClientError) as over_cap:
        gemini(capped.secret).models.generate_content_stream(model="aria-haiku-4.5", contents="hi").__next__()
    assert (over_cap.value.code, over_cap.value.status) == (402, "FAILED_PRECONDITION")
    assert wired.fake.count == 1
    assert balance(wired, poor.id) == (1, 0)


def test_a_body_too_large_is_refused_in_googles_shape(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data", server={"max_body_bytes": 1024}) as gateway:
        account = gateway.account("gemini-large", 10)
        secret = gateway.key(account, "Pro", rpm=100).secret
        big = {"contents": [{"role": "user", "parts": [{"text": "x" * 4000}]}]}
        with httpx.Client(base_url=gateway.base_url, timeout=30) as http:
            declared = http.post(
                "/v1beta/models/aria-haiku-4.5:generateContent", json=big, headers={"x-goog-api-key": secret}
            )
            chunked = http.post(
                f"/v1/models/aria-haiku-4.5:streamGenerateContent?alt=sse&key={secret}",
                content=iter([orjson.dumps(big)]),
            )
        assert "1024" in google_error(declared, 413, "INVALID_ARGUMENT")
        google_error(chunked, 413, "INVALID_ARGUMENT")
        stored = gateway.call(gateway.services.accounts.get_account(account.id))
        assert stored is not None and (stored.balance_uc, stored.reserved_uc) == (10_000_000, 0)

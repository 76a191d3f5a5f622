"""Structured output on a fresh gateway: the simulator answers a requested JSON schema with JSON
valid against it, in all three formats, whole and streamed, judged by the official SDKs' own
structured-output helpers (which parse and validate the reply into a Pydantic model)."""

from __future__ import annotations

import datetime
import enum
import random
import uuid
from typing import Any, Literal

import httpx
import jsonschema
import orjson
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

from modelgate.billing.estimate import count_tokens
from tests.fuzz.hostile import SCHEMAS, structured
from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Step(BaseModel):
    title: str = Field(min_length=12)
    minutes: int = Field(ge=5, le=90)
    done: bool


class Plan(BaseModel):
    id: uuid.UUID
    starts: datetime.datetime
    owner_email: str | None
    priority: Priority
    kind: Literal["trip", "errand"]
    steps: list[Step] = Field(min_length=3)
    after: Plan | None = None


PROMPT = "Plan my weekend trip"


def test_chat_parse_whole_and_streamed(gateway: GatewayServer, sdk: SdkClients) -> None:
    client = sdk.openai(gateway.base_url, gateway.key(gateway.account("acme"), "Nova").secret)
    messages: Any = [{"role": "user", "content": PROMPT}]
    whole = client.chat.completions.parse(model="nova-5.5", messages=messages, response_format=Plan)
    plan = whole.choices[0].message.parsed
    assert isinstance(plan, Plan) and len(plan.steps) == 3 and whole.choices[0].finish_reason == "stop"
    content = whole.choices[0].message.content or ""
    jsonschema.validate(orjson.loads(content), to_strict_json_schema(Plan))
    # Billed as what was generated: the JSON's tokens.
    assert whole.usage is not None and whole.usage.completion_tokens == count_tokens(content)
    with client.chat.completions.stream(model="nova-5.5", messages=messages, response_format=Plan) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert len(deltas) > 10 and "".join(deltas) == content  # the same JSON, in many deltas
    assert final.choices[0].message.parsed == plan


def test_responses_parse_whole_and_streamed(gateway: GatewayServer, sdk: SdkClients) -> None:
    client = sdk.openai(gateway.base_url, gateway.key(gateway.account("acme"), "Nova").secret)
    whole = client.responses.parse(model="nova-5.5", input=PROMPT, text_format=Plan)
    assert isinstance(whole.output_parsed, Plan) and whole.output_parsed.kind == "trip"
    with client.responses.stream(model="nova-5.5", input=PROMPT, text_format=Plan) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(deltas) > 10 and "".join(deltas) == whole.output_text
    assert final.output_parsed == whole.output_parsed


def test_messages_parse_whole_and_streamed(gateway: GatewayServer, sdk: SdkClients) -> None:
    client = sdk.anthropic(gateway.base_url, gateway.key(gateway.account("acme"), "Pro").secret)
    messages: Any = [{"role": "user", "content": PROMPT}]
    whole = client.messages.parse(
        model="aria-haiku-4.5", max_tokens=2000, messages=messages, output_format=Plan
    )
    assert isinstance(whole.parsed_output, Plan) and whole.stop_reason == "end_turn"
    text = "".join(b.text for b in whole.content if b.type == "text")
    with client.messages.stream(
        model="aria-haiku-4.5", max_tokens=2000, messages=messages, output_format=Plan
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text and final.parsed_output == whole.parsed_output


class Ticket(BaseModel):
    code: str = Field(pattern=r"^[A-Z]{3}-\d{4}$")
    phone: str = Field(pattern=r"^\+?[1-9]\d{6,14}$")
    labels: list[Literal["bug", "feature"]]


def test_patterns_through_the_openai_helpers(gateway: GatewayServer, sdk: SdkClients) -> None:
    client = sdk.openai(gateway.base_url, gateway.key(gateway.account("acme"), "Nova").secret)
    chat = client.chat.completions.parse(
        model="nova-5.5", messages=[{"role": "user", "content": PROMPT}], response_format=Ticket
    )
    assert chat.choices[0].message.parsed == Ticket(code="AAA-0000", phone="1000000", labels=["bug"])
    responses = client.responses.parse(model="nova-5.5", input=PROMPT, text_format=Ticket)
    assert responses.output_parsed == chat.choices[0].message.parsed


def test_raw_schemas_in_each_field_and_json_object_mode(gateway: GatewayServer) -> None:
    account = gateway.account("acme")
    nova = {"authorization": "Bearer " + gateway.key(account, "Nova").secret}
    pro = {"x-api-key": gateway.key(account, "Pro").secret, "anthropic-version": "2023-06-01"}
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 2}
        },
        "required": ["tags"],
        "additionalProperties": False,
    }
    url = gateway.base_url
    user = [{"role": "user", "content": PROMPT}]
    with httpx.Client(timeout=30) as http:
        chat = http.post(
            f"{url}/v1/chat/completions",
            headers=nova,
            json={
                "model": "nova-5.5",
                "messages": user,
                "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}},
            },
        ).json()
        responses = http.post(
            f"{url}/v1/responses",
            headers=nova,
            json={
                "model": "nova-5.5",
                "input": PROMPT,
                "text": {"format": {"type": "json_schema", "name": "t", "schema": schema}},
            },
        ).json()
        newer = {"output_config": {"format": {"type": "json_schema", "schema": schema}}}
        older = {"output_format": {"type": "json_schema", "schema": schema}}  # the beta's field
        messages = [
            http.post(
                f"{url}/v1/messages",
                headers=pro,
                json={"model": "aria-haiku-4.5", "max_tokens": 500, "messages": user, **field},
            ).json()
            for field in (newer, older)
        ]
        chat_object = http.post(
            f"{url}/v1/chat/completions",
            headers=nova,
            json={"model": "nova-5.5", "messages": user, "response_format": {"type": "json_object"}},
        ).json()
        responses_object = http.post(
            f"{url}/v1/responses",
            headers=nova,
            json={"model": "nova-5.5", "input": PROMPT, "text": {"format": {"type": "json_object"}}},
        ).json()
        plain = http.post(
            f"{url}/v1/chat/completions", headers=nova, json={"model": "nova-5.5", "messages": user}
        ).json()
    texts = [
        chat["choices"][0]["message"]["content"],
        responses["output"][0]["content"][0]["text"],
        *(m["content"][0]["text"] for m in messages),
    ]
    for text in texts:
        value = orjson.loads(text)
        jsonschema.validate(value, schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        assert value == {"tags": ["simulator@example.com", "simulator@example.com"]}
    for text in (
        chat_object["choices"][0]["message"]["content"],
        responses_object["output"][0]["content"][0]["text"],
    ):
        assert orjson.loads(text)["reply"].startswith("[simulator] You said: Plan my weekend trip.")
    assert plain["choices"][0]["message"]["content"].startswith("[simulator] You said:")  # prose otherwise


def test_a_tool_call_still_comes_first_and_the_answer_after_it_is_structured(
    gateway: GatewayServer, sdk: SdkClients
) -> None:
    client = sdk.openai(gateway.base_url, gateway.key(gateway.account("acme"), "Nova").secret)
    parameters = {"type": "object", "properties": {}, "additionalProperties": False}
    tools: Any = [
        {"type": "function", "function": {"name": "lookup", "parameters": parameters, "strict": True}}
    ]
    messages: Any = [{"role": "user", "content": PROMPT}]
    first = client.chat.completions.parse(
        model="nova-5.5", messages=messages, tools=tools, tool_choice="required", response_format=Plan
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    assert first.choices[0].finish_reason == "tool_calls" and first.choices[0].message.parsed is None
    messages += [
        {"role": "assistant", "tool_calls": [call.model_dump(include={"id", "type", "function"})]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = client.chat.completions.parse(
        model="nova-5.5", messages=messages, tools=tools, response_format=Plan
    )
    assert isinstance(second.choices[0].message.parsed, Plan)


def test_hostile_schemas_get_an_answer_in_format_never_a_5xx(gateway: GatewayServer) -> None:
    account = gateway.account("acme")
    nova = {"authorization": "Bearer " + gateway.key(account, "Nova").secret}
    pro = {"x-api-key": gateway.key(account, "Pro").secret, "anthropic-version": "2023-06-01"}
    rng = random.Random(7)
    statuses = []
    with httpx.Client(timeout=30) as http:
        for schema in SCHEMAS:
            for fmt, path, model, headers in (
                ("messages", "/v1/messages", "aria-haiku-4.5", pro),
                ("chat", "/v1/chat/completions", "nova-5.5", nova),
                ("responses", "/v1/responses", "nova-5.5", nova),
            ):
                body = {"model": model, "max_tokens": 400, **structured(fmt, schema, rng)}
                if fmt == "responses":
                    body = {
                        "model": model,
                        "max_output_tokens": 400,
                        "input": PROMPT,
                        **structured(fmt, schema, rng),
                    }
                else:
                    body["messages"] = [{"role": "user", "content": PROMPT}]
                for stream in (False, True):
                    reply = http.post(
                        gateway.base_url + path, headers=headers, json={**body, "stream": stream}
                    )
                    statuses.append(reply.status_code)
                    assert reply.status_code < 500, (schema, fmt, reply.text[:300])
                    if reply.status_code >= 400:
                        error = reply.json()
                        assert error["type"] == "error" if fmt == "messages" else "error" in error
    assert statuses.count(200) > len(statuses) // 2  # most are answered (with best-effort JSON)

"""One call through the gateway with an official SDK, reduced to what a client could observe.

Every SDK exception is turned into an ``Outcome`` so tests can compare formats side by side; the
SDK stays the judge: if it cannot parse a body or a stream, the test sees its exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic
import openai

from tests.gateway.clients import anthropic_client, openai_client

Format = Literal["messages", "chat", "responses"]
PROMPT = "Tell me something"


@dataclass
class Outcome:
    status: int
    text: str = ""
    #: Messages ``error.type``; OpenAI ``error.type``.
    error_type: str | None = None
    #: OpenAI ``error.code`` (None on Messages).
    error_code: str | None = None
    message: str = ""
    #: The error arrived in-band, after a 200 and some stream events.
    in_band: bool = False
    events: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    #: Everything the client received, for secret scans.
    raw: str = ""


def call(base_url: str, key: str, fmt: Format, model: str, *, stream: bool, prompt: str = PROMPT) -> Outcome:
    try:
        if fmt == "messages":
            with anthropic_client(base_url, key) as claude:
                return _messages(claude, model, stream, prompt)
        with openai_client(base_url, key) as gpt:
            if fmt == "chat":
                return _chat(gpt, model, stream, prompt)
            return _responses(gpt, model, stream, prompt)
    except anthropic.APIStatusError as exc:
        body: Any = exc.body
        error = body.get("error", {}) if isinstance(body, dict) else {}
        return Outcome(
            exc.status_code,
            error_type=error.get("type"),
            message=str(error.get("message", "")),
            headers=dict(exc.response.headers),
            raw=exc.response.text if exc.status_code != 200 else str(body),
        )
    except openai.APIStatusError as exc:
        body = exc.body
        return Outcome(
            exc.status_code,
            error_type=exc.type,
            error_code=exc.code,
            message=str(body.get("message", "") if isinstance(body, dict) else exc.message),
            headers=dict(exc.response.headers),
            raw=exc.response.text,
        )


def _messages(client: anthropic.Anthropic, model: str, stream: bool, prompt: str) -> Outcome:
    messages: Any = [{"role": "user", "content": prompt}]
    if not stream:
        raw = client.messages.with_raw_response.create(model=model, max_tokens=64, messages=messages)
        msg = raw.parse()
        text = "".join(b.text for b in msg.content if b.type == "text")
        return Outcome(raw.status_code, text=text, headers=dict(raw.headers), raw=raw.http_response.text)
    out = Outcome(200)
    try:
        with client.messages.create(model=model, max_tokens=64, messages=messages, stream=True) as events:
            out.headers = dict(events.response.headers)
            for event in events:
                out.events.append(event.type)
                out.raw += event.model_dump_json()
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    out.text += event.delta.text
    except anthropic.APIStatusError as exc:
        if exc.status_code != 200:
            raise
        body: Any = exc.body
        error = body.get("error", {}) if isinstance(body, dict) else {}
        out.in_band = True
        out.error_type = error.get("type")
        out.message = str(error.get("message", ""))
        out.raw += str(body)
    return out


def _chat(client: openai.OpenAI, model: str, stream: bool, prompt: str) -> Outcome:
    messages: Any = [{"role": "user", "content": prompt}]
    if not stream:
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)
        completion = raw.parse()
        return Outcome(
            raw.status_code,
            text=completion.choices[0].message.content or "",
            headers=dict(raw.headers),
            raw=raw.http_response.text,
        )
    out = Outcome(200)
    try:
        with client.chat.completions.create(model=model, messages=messages, stream=True) as chunks:
            out.headers = dict(chunks.response.headers)
            for chunk in chunks:
                out.events.append("chunk")
                out.raw += chunk.model_dump_json()
                if chunk.choices and chunk.choices[0].delta.content:
                    out.text += chunk.choices[0].delta.content
    except openai.APIStatusError:
        raise
    except openai.APIError as exc:
        out.in_band = True
        out.error_type, out.error_code, out.message = exc.type, exc.code, exc.message
        out.raw += str(exc.body)
    return out


def _responses(client: openai.OpenAI, model: str, stream: bool, prompt: str) -> Outcome:
    if not stream:
        raw = client.responses.with_raw_response.create(model=model, input=prompt)
        response = raw.parse()
        return Outcome(
            raw.status_code, text=response.output_text, headers=dict(raw.headers), raw=raw.http_response.text
        )
    out = Outcome(200)
    try:
        with client.responses.create(model=model, input=prompt, stream=True) as events:
            out.headers = dict(events.response.headers)
            for event in events:
                out.events.append(event.type)
                out.raw += event.model_dump_json()
                if event.type == "response.output_text.delta":
                    out.text += event.delta
    except openai.APIStatusError:
        raise
    except openai.APIError as exc:
        out.in_band = True
        out.error_type, out.error_code, out.message = exc.type, exc.code, exc.message
        out.raw += str(exc.body)
    return out

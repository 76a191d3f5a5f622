"""The built-in simulator upstream: deterministic replies, honest token counts, no network.

It implements the provider interface in-process and speaks all three dialects, so the gateway's
request path treats it exactly like a remote upstream (passthrough, usage taps, settlement).

Behaviour, documented for users and relied on by tests:
- Tokens are counted with the gateway's one estimator (``billing.estimate``: ``\\w+`` runs and
  single symbols) over all request text: system, messages, tool results, tool names, descriptions
  and schemas. The reply's ``output_tokens`` is exactly the number of such tokens it generated.
- The reply text is ``[simulator] You said: <first words of the last user text>.`` followed by
  words picked deterministically from a hash of the whole prompt; the same request always gets
  the same reply. ``max_tokens`` truncates it (stop reason ``max_tokens``) and stop sequences cut
  it (``stop_sequence``).
- Structured output is honoured: a request asking for a JSON schema (Chat ``response_format``,
  Responses ``text.format``, Messages ``output_config.format`` or ``output_format``) is answered
  with a deterministic instance valid against the schema (``schema_instance``); ``json_object``
  mode with ``{"reply": <the text above>}``. Streams carry the same JSON split into deltas.
- A tool call is made when the request offers tools and asks for one: ``tool_choice`` is
  ``any``/``required`` or names a tool, or the last user text mentions a tool's name. Its input
  fills the schema's required properties with placeholder values. After a tool result the
  simulator answers in text, so a round trip ends.
- ``simulator.latency_ms`` delays the first byte; ``simulator.tokens_per_second`` paces output.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from modelgate import errors, ir
from modelgate.billing.estimate import count_tokens, part_text, prompt_text
from modelgate.formats import CODECS, DIALECTS, ClientRequest, ids
from modelgate.formats.base import decode_untrusted
from modelgate.offload import Offload
from modelgate.upstream.base import Dialect, UpstreamReply
from modelgate.upstream.config import SimulatorConfig
from modelgate.upstream.schema_instance import instance_of

_VOCABULARY = [
    "gateway",
    "token",
    "stream",
    "credit",
    "model",
    "request",
    "answer",
    "simple",
    "clear",
    "steady",
    "bright",
    "quiet",
    "river",
    "signal",
    "window",
    "harbor",
    "lantern",
    "meadow",
    "orbit",
    "pixel",
    "quartz",
    "ledger",
    "prism",
    "summit",
    "valley",
    "echo",
]


def _last_user_text(req: ir.Request) -> str:
    for message in reversed(req.messages):
        if message.role == "user":
            return " ".join(p.text for p in message.content if isinstance(p, ir.TextPart))
    return ""


def _ends_with_tool_result(req: ir.Request) -> bool:
    last = req.messages[-1] if req.messages else None
    return last is not None and any(isinstance(p, ir.ToolResultPart) for p in last.content)


def _placeholder(schema: Any) -> Any:
    kind = schema.get("type") if isinstance(schema, dict) else None
    return {"string": "simulated", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}.get(
        kind if isinstance(kind, str) else "string", "simulated"
    )


def _tool_to_call(req: ir.Request) -> ir.Tool | None:
    if not req.tools or _ends_with_tool_result(req):
        return None
    choice = req.tool_choice
    if choice is not None and choice.type == "none":
        return None
    if choice is not None and choice.type == "tool":
        return next((t for t in req.tools if t.name == choice.name), req.tools[0])
    if choice is not None and choice.type == "any":
        return req.tools[0]
    text = _last_user_text(req)
    return next((t for t in req.tools if t.name in text), None)


def _pieces(text: str) -> list[str]:
    """Split text into token-sized deltas (each delta carries its leading space)."""
    return re.findall(r"\s*(?:\w+|[^\w\s])", text)


def _structured(req: ir.Request, text: str) -> str:
    """The reply as the requested JSON (``text`` unchanged when no JSON output was asked for)."""
    fmt = req.response_format
    kind = fmt.get("type") if fmt is not None else None
    if fmt is not None and kind == "json_schema":
        return orjson.dumps(instance_of(fmt.get("schema") or {})).decode()
    if kind == "json_object":
        return orjson.dumps({"reply": text}).decode()
    return text


def simulate(req: ir.Request, response_id: str, tool_id: str, reply_words: int) -> ir.Response:
    prompt = prompt_text(req)
    seed = hashlib.sha256(prompt.encode()).digest()
    usage = ir.Usage(input_tokens=count_tokens(prompt))
    tool = _tool_to_call(req)
    if tool is not None:
        # With JSON output asked for, any text would have to be that JSON: the call comes alone.
        text = "" if req.response_format is not None else f"[simulator] Calling {tool.name}."
    elif _ends_with_tool_result(req):
        # Echo the result itself, so a client can see its tool output reached the model.
        results = " ".join(part_text(p) for p in req.messages[-1].content if isinstance(p, ir.ToolResultPart))
        text = "[simulator] Tool result received: " + " ".join(results.split()[:8]).strip()
        text = _structured(req, text.rstrip() + " Done.")
    else:
        echo = " ".join(_last_user_text(req).split()[:8])
        words = [_VOCABULARY[seed[i % len(seed)] % len(_VOCABULARY)] for i in range(reply_words)]
        text = _structured(req, f"[simulator] You said: {echo}. " + " ".join(words) + ".")
    limit = req.max_tokens if req.max_tokens is not None else 1 << 30
    stop = ir.StopReason.END_TURN
    stop_sequence = None
    for sequence in req.stop_sequences:
        at = text.find(sequence) if sequence else -1
        if at >= 0:
            text, stop, stop_sequence, tool = text[:at], ir.StopReason.STOP_SEQUENCE, sequence, None
    pieces = _pieces(text)
    if len(pieces) > limit:
        pieces, stop, stop_sequence, tool = pieces[:limit], ir.StopReason.MAX_TOKENS, None, None
    content: list[ir.OutputPart] = []
    if pieces:
        content.append(ir.TextPart("".join(pieces)))
    usage.output_tokens = len(pieces)
    if tool is not None:
        required = tool.input_schema.get("required") or []
        properties = tool.input_schema.get("properties") or {}
        arguments = {name: _placeholder(properties.get(name)) for name in required}
        usage.output_tokens += count_tokens(tool.name + orjson.dumps(arguments).decode())
        content.append(ir.ToolUsePart(id=tool_id, name=tool.name, input=arguments))
        stop = ir.StopReason.TOOL_USE
    return ir.Response(response_id, req.model, content, stop, usage, stop_sequence)


def stream_events(resp: ir.Response) -> list[ir.Event]:
    events: list[ir.Event] = [
        ir.Start(resp.id, resp.model, ir.Usage(input_tokens=resp.usage.input_tokens, output_tokens=1))
    ]
    for index, part in enumerate(resp.content):
        if isinstance(part, ir.TextPart):
            events.append(ir.BlockStart(index, "text"))
            events.extend(ir.TextDelta(index, piece) for piece in _pieces(part.text))
        elif isinstance(part, ir.ToolUsePart):
            events.append(ir.BlockStart(index, "tool_use", tool_id=part.id, tool_name=part.name))
            arguments = orjson.dumps(part.input).decode()
            cut = len(arguments) // 2
            events.extend(
                ir.ToolArgsDelta(index, frag) for frag in (arguments[:cut], arguments[cut:]) if frag
            )
        events.append(ir.BlockStop(index))
    events.append(ir.Finish(resp.stop_reason, resp.usage, resp.stop_sequence))
    return events


class SimulatedReply:
    def __init__(
        self, status: int, body: bytes, chunks: list[bytes] | None, pace: float, content_type: str
    ) -> None:
        self.status = status
        self.headers: Mapping[str, str] = {"content-type": content_type, "x-modelgate-upstream": "simulator"}
        self._body = body
        self._chunks = chunks
        self._pace = pace

    async def read(self) -> bytes:
        if self._chunks is not None:
            return b"".join([chunk async for chunk in self.iter_chunks()])
        return self._body

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks if self._chunks is not None else [self._body]:
            if self._pace:
                await asyncio.sleep(self._pace)
            yield chunk

    async def close(self) -> None:
        self._chunks = []


@dataclass(frozen=True, slots=True)
class Simulated:
    """One simulated exchange, before pacing: small enough to cross back from a worker process."""

    status: int
    body: bytes
    chunks: list[bytes] | None
    content_type: str
    output_tokens: int = 0


def simulate_exchange(
    dialect: Dialect, body: bytes, stream: bool, counting: bool, reply_words: int
) -> Simulated:
    """Answer ``body`` as the simulated upstream of ``dialect`` would (pure; runs inline, or in
    a worker process for a large body)."""
    codec = CODECS[dialect]
    try:
        data = orjson.loads(body)
        if not isinstance(data, dict):
            raise errors.InvalidRequest("request body must be a JSON object")
        # Refuse what the gateway would refuse for this format, as a real upstream does.
        codec.validate(data, counting=counting)
        req = decode_untrusted(codec, data)
    except (errors.GatewayError, orjson.JSONDecodeError) as exc:
        error = exc if isinstance(exc, errors.GatewayError) else errors.InvalidRequest("malformed JSON")
        payload = codec.render_error(error, ids.new_request_id())
        return Simulated(CODECS[dialect].http_status(error), payload, None, "application/json")
    if counting:
        payload = orjson.dumps({"input_tokens": count_tokens(prompt_text(req))})
        return Simulated(200, payload, None, "application/json")
    client = ClientRequest(codec, data, req.model, req)
    resp = simulate(req, codec.new_response_id(), codec.new_tool_call_id(), reply_words)
    if not stream:
        payload = orjson.dumps(codec.encode_response(resp, client))
        return Simulated(200, payload, None, "application/json", resp.usage.output_tokens)
    encoder = codec.stream_encoder(client)
    chunks = [frame for event in stream_events(resp) if (frame := encoder.encode(event))]
    return Simulated(200, b"", chunks, "text/event-stream", resp.usage.output_tokens)


class SimulatorProvider:
    kind = "simulator"
    dialects: frozenset[Dialect] = frozenset(DIALECTS)  # every format an upstream may speak
    legacy_chat_limit = False

    def __init__(self, name: str, config: SimulatorConfig, offload: Offload | None = None) -> None:
        self.name = name
        self.config = config
        #: Large bodies are simulated in a worker process: the simulator runs inside the gateway,
        #: so its tokenizing must not stall the gateway's loop either.
        self._offload = offload

    async def send(
        self,
        dialect: Dialect,
        body: bytes,
        *,
        stream: bool,
        client_headers: Mapping[str, str],
        path_suffix: str = "",
    ) -> UpstreamReply:
        config = self.config
        if config.latency_ms:
            await asyncio.sleep(config.latency_ms / 1000)
        counting = path_suffix == "/count_tokens"
        if self._offload is not None and len(body) > config.offload_body_bytes:
            result = await self._offload.run(
                simulate_exchange, dialect, body, stream, counting, config.reply_words
            )
        else:
            result = simulate_exchange(dialect, body, stream, counting, config.reply_words)
        pace = 1.0 / config.tokens_per_second if config.tokens_per_second else 0.0
        if result.chunks is None:
            # Pacing a whole response: the time to generate every output token, before any byte.
            if pace and result.output_tokens:
                await asyncio.sleep(pace * result.output_tokens)
            return SimulatedReply(result.status, result.body, None, 0.0, result.content_type)
        return SimulatedReply(result.status, b"", result.chunks, pace, result.content_type)

    async def aclose(self) -> None:
        return None

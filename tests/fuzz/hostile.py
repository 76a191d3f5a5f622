"""A seeded generator of hostile requests for every endpoint (issue #11).

Each request starts from a valid one for its endpoint and breaks it one or more ways: wrong types
in every field the formats read, junk inside content blocks, tools and tool choices, duplicated
and escaped keys, deep nesting, huge and odd numbers, invalid UTF-8 and JSON, odd headers and
methods, and hostile admin paths, query strings and bodies. The same seed gives the same requests.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1.5, -0.0, 2**63, -(2**63) - 1, 10**30, "", "x", "²", "١٢٣", "\u0000", "\ud83d\ude00",
    "NaN", "Infinity", "1e400", [], [None], [[]], {}, {"": ""}, {"type": 5}, "a" * 5000,
]  # fmt: skip
ODD_NUMBERS = [
    "1e400",
    "-1e400",
    "99999999999999999999999999999",
    "-0",
    "0.0000001",
    "1E5",
    "3.",
    "0x10",
    "NaN",
]
FIELDS = {
    "messages": ["model", "max_tokens", "messages", "system", "stream", "tools", "tool_choice", "stop_sequences",
                 "temperature", "top_p", "top_k", "metadata", "thinking", "output_config", "cache_control"],
    "chat": ["model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options", "tools",
             "tool_choice", "n", "stop", "response_format", "user", "parallel_tool_calls", "reasoning_effort"],
    "responses": ["model", "input", "instructions", "max_output_tokens", "stream", "tools", "tool_choice",
                  "text", "reasoning", "previous_response_id", "store", "parallel_tool_calls",
                  "conversation", "background", "prompt", "max_tool_calls"],
}  # fmt: skip
BLOCKS: list[Any] = [
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "!!!!"}},
    {"type": "image", "source": 5},
    {"type": "image", "source": {"type": "url", "url": 7}},
    {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
    {"type": "document", "source": {"type": "content", "content": 5}},
    {"type": "tool_use", "id": 1, "name": None, "input": "x"},
    {"type": "tool_result", "tool_use_id": "t", "content": [5, {"type": "image"}, None]},
    {"type": "tool_result", "tool_use_id": None, "content": {"x": 1}},
    {"type": "thinking"},
    {"type": "text"},
    {"type": "text", "text": 5},
    {"type": "image_url", "image_url": "data:image/png;base64,@@"},
    {"type": "image_url", "image_url": {"url": None}},
    {"type": "file", "file": {"file_data": "data:application/pdf;base64,%%%"}},
    {"type": "input_image", "image_url": 5},
    {"type": "input_file", "file_data": 5},
    {"type": "function_call", "call_id": 5, "name": [], "arguments": {}},
    {"type": "function_call_output", "call_id": None, "output": [5]},
    {"type": "item_reference", "id": "msg_1"},
    {"type": "item_reference", "id": 5}, {"type": "item_reference"}, {"id": ""}, {"id": ["msg_1"]},
    {"id": "msg_" + "x" * 3000}, {"type": "item_reference", "id": "msg_%00\u0000"},
    {"type": "reasoning", "summary": 5},
    {"type": "message", "role": "user", "content": 5},
    5, "x", None, [], {},
    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "tool_reference"}]},
    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "tool_reference", "tool_name": 5}]},
    {"type": "tool_result", "tool_use_id": "t",
     "content": [{"type": "tool_reference", "tool_name": "X"}, {"type": "tool_reference", "tool_name": ""}]},
    {"type": "server_tool_use", "id": 5, "name": "web_search", "input": 5},
    {"type": "web_search_tool_result", "tool_use_id": None, "content": 5},
    {"type": "web_search_call", "id": 5, "action": 5, "status": []},
]  # fmt: skip
TOOLS: list[Any] = [
    5, "x", [5], [None], [{}], [{"name": 5}], [{"name": "t", "input_schema": 5}],
    [{"type": "function", "function": 5}], [{"type": "function", "function": {"name": None}}],
    [{"type": "namespace", "name": "ns", "tools": 5}], [{"type": "namespace", "tools": [5, {"type": "function"}]}],
    [{"type": "web_search"}], [{"type": "custom", "name": "x"}], [{"type": "function", "name": "f", "parameters": 5}],
    [{"type": "web_search", "filters": 5}], [{"type": "web_search", "filters": {"allowed_domains": [5]}}],
    [{"type": "web_search", "user_location": "oslo"}], [{"type": "web_search_preview", "user_location": {"city": 5}}],
    [{"type": "web_search_20250305", "name": "web_search", "max_uses": -1}],
    [{"type": "web_search_20250305", "name": "web_search", "max_uses": "3", "allowed_domains": "x"}],
    [{"type": "web_search_20250305", "name": "web_search", "user_location": [1], "blocked_domains": [None]}],
    [{"type": "web_search_20250305"}], [{"type": "web_search_2099", "name": 5}],
    [{"name": "d", "defer_loading": "yes", "input_schema": {}}], [{"name": "DeferredToolPlaceholder", "defer_loading": True}],
    [{"type": "file_search"}, {"type": "mcp", "server_label": 5}, {"type": 5}],
    [{"type": "x\r\nset-cookie: a=b"}], [{"type": "t" * 300, "name": "n"}], [{"type": "é", "name": "n"}],
    # Web search tools with hostile max_uses (the hold's search bound reads them).
    [{"type": "web_search_20250305", "name": "web_search", "max_uses": -5}],
    [{"type": "web_search_20250305", "name": "web_search", "max_uses": 10**30}],
    [{"type": "web_search_20250305", "name": "web_search", "max_uses": True}],
    [{"type": "web_search_20250305", "name": "web_search", "max_uses": "3"}],
    [{"type": 5, "max_uses": 2}, {"type": "web_search_preview", "max_uses": None}, {"type": "web_search_x"}],
]  # fmt: skip
TOOL_CHOICES: list[Any] = [
    5,
    "x",
    "required",
    {},
    {"type": "tool"},
    {"type": "tool", "name": 5},
    {"type": "function"},
    {"type": "web_search_preview"},
    {"type": "file_search"},
    {"type": "mcp", "server_label": 5},
    {"type": "tool", "name": "web_search"},
    {"type": "allowed_tools", "tools": 5},
    {"type": 5},
    {"type": "x\r\nset-cookie: a=b"},
]
#: Hostile reasoning controls: (field, value) per format.
EFFORTS: dict[str, list[tuple[str, Any]]] = {
    "messages": [("output_config", {"effort": 5}), ("output_config", {"effort": ["high"]}),
                 ("output_config", {"effort": None}), ("output_config", {"effort": "ultra"}),
                 ("thinking", {"type": "adaptive", "display": 5}), ("thinking", {"type": "enabled", "budget_tokens": "x"})],
    "chat": [("reasoning_effort", 5), ("reasoning_effort", {"effort": "high"}), ("reasoning_effort", "max")],
    "responses": [("reasoning", {"effort": 5}), ("reasoning", {"effort": []}), ("reasoning", 5),
                  ("reasoning", {"effort": "minimal", "summary": 5})],
}  # fmt: skip
#: Structured-output schemas the simulator must answer without a 5xx or a stall: huge bounds,
#: self-reference from required properties, reference loops, contradictions, wrong types.
SCHEMAS: list[Any] = [
    {"type": "array", "minItems": 10**9, "items": {"type": "string", "minLength": 10**9}},
    {"type": "object", "properties": {k: {"$ref": "#"} for k in "abcd"}, "required": list("abcd")},
    {"allOf": [{"$ref": "#"}]}, {"anyOf": [{"$ref": "#"}]}, {"oneOf": []}, {"enum": []},
    {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
    {"type": "integer", "minimum": 1e300}, {"type": "number", "minimum": 1e308, "multipleOf": 1e-300},
    {"type": "integer", "minimum": 5, "maximum": 1}, {"type": "integer", "multipleOf": 0},
    {"type": "string", "description": "{} " * 20000 + "x"}, {"type": "object", "minProperties": 10**9},
    {"type": 5, "properties": [], "required": {"a": 1}, "items": "x", "anyOf": "x", "allOf": 7},
    {"$ref": 5}, {"$ref": "http://127.0.0.1:9/schema"}, {"$ref": "#/nope/0"}, {"type": ["array"], "maxItems": -1},
    {"type": "string", "pattern": "(x+x+)+y", "minLength": 4000}, {"type": "string", "format": 5},
]  # fmt: skip


def structured(fmt: str, schema: Any, rng: random.Random) -> dict[str, Any]:
    """The field asking ``fmt``'s endpoint for JSON output, around ``schema``."""
    if rng.random() < 0.1:
        schema = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    if fmt == "messages":
        return rng.choice([{"output_config": {"format": {"type": "json_schema", "schema": schema}}},
                           {"output_format": {"type": "json_schema", "schema": schema}}])  # fmt: skip
    if fmt == "chat":
        kind = rng.choice(["json_schema", "json_schema", "json_object"])
        return {"response_format": {"type": kind, "json_schema": {"name": "x", "schema": schema}}}
    return {"text": {"format": {"type": "json_schema", "name": "x", "schema": schema}}}


@dataclass
class Hostile:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""
    #: The wire format errors must come in: messages, openai, google, admin, or none (no body check).
    shape: str = "openai"
    tags: list[str] = field(default_factory=list)


#: Models per format: the simulator's passthrough, and a route translated to another dialect.
MODELS = {"messages": ["aria-haiku-4.5", "aria-sonnet-4.6"], "chat": ["nova-5.5", "nova-5.6-sol"],
          "responses": ["nova-5.5", "nova-5.6-sol"]}  # fmt: skip


def valid(fmt: str, rng: random.Random) -> dict[str, Any]:
    stream = rng.random() < 0.3
    model = rng.choice(MODELS[fmt])
    if fmt == "messages":
        return {"model": model, "max_tokens": 16, "stream": stream,
                "messages": [{"role": "user", "content": "hello there"}]}  # fmt: skip
    if fmt == "chat":
        return {"model": model, "max_tokens": 16, "stream": stream,
                "messages": [{"role": "user", "content": "hello there"}]}  # fmt: skip
    return {"model": model, "max_output_tokens": 16, "stream": stream, "input": "hello there"}


def mutate(fmt: str, body: dict[str, Any], rng: random.Random, tags: list[str]) -> dict[str, Any]:
    choice = rng.randrange(12)
    if choice == 0:
        name = rng.choice(FIELDS[fmt])
        body[name] = rng.choice(ODD_VALUES)
        tags.append(f"field:{name}")
    elif choice == 1:
        blocks = [rng.choice(BLOCKS) for _ in range(rng.randint(1, 4))]
        if fmt == "responses":
            body["input"] = rng.choice([blocks, [{"role": "user", "content": blocks}]])
        else:
            body["messages"] = [
                {"role": rng.choice(["user", "assistant", "system", "tool", 5]), "content": blocks}
            ]
        tags.append("blocks")
    elif choice == 2:
        body["tools"] = rng.choice(TOOLS)
        tags.append("tools")
    elif choice == 3:
        body["tool_choice"] = rng.choice(TOOL_CHOICES)
        body["tools"] = rng.choice(TOOLS)
        tags.append("tool_choice")
    elif choice == 4:
        depth = rng.choice([100, 130, 260, 600])
        body["metadata"] = json.loads("[" * depth + "]" * depth)
        tags.append(f"depth:{depth}")
    elif choice == 5:
        messages = body.get("messages")
        if isinstance(messages, list):
            body["messages"] = [
                rng.choice([5, None, {}, {"role": 5}, {"role": "user"}, {"role": "user", "content": 5}])
            ]
        else:
            body["input"] = rng.choice([5, None, {}, [5], [{"role": 5}]])
        tags.append("conversation")
    elif choice == 6:
        body["model"] = rng.choice(
            ["opus", "nova-6-astra", "aria-opus-4.8", "m" * 3000, "aria-haiku-4.5\u0000"]
        )
        tags.append("model")
    elif choice == 7:
        for key in list(body):
            if rng.random() < 0.5:
                body[key] = rng.choice(ODD_VALUES)
        tags.append("many")
    elif choice == 8:
        body.update(structured(fmt, rng.choice([*SCHEMAS, *ODD_VALUES]), rng))
        tags.append("structured")
    elif choice == 9:
        body["stream_options"] = rng.choice([5, {"include_usage": "yes"}, {"include_usage": True}, []])
        tags.append("stream_options")
    elif choice == 10:
        name, value = rng.choice(EFFORTS[fmt])
        body[name] = value
        tags.append(f"effort:{name}")
    else:  # what session affinity reads (upstream.affinity_key)
        body[rng.choice(["prompt_cache_key", "metadata", "system", "instructions"])] = rng.choice(
            SESSION_VALUES
        )
        tags.append("session")
    return body


SESSION_VALUES: list[Any] = [
    5, None, "", "k" * 100_000, [], {}, {"user_id": 5}, {"user_id": "u" * 50_000}, [{"text": 5}],
    [{"type": "text", "text": "s" * 10_000, "cache_control": 5}], [[[]]], [{"content": [{"content": 5}]}],
]  # fmt: skip


def encode(body: dict[str, Any], rng: random.Random, tags: list[str]) -> bytes:
    raw = json.dumps(body).encode()
    trick = rng.randrange(10)
    if trick == 0 and raw.startswith(b"{"):
        raw = b'{"model":"aria-opus-4.8",' + raw[1:]  # a duplicated control field
        tags.append("duplicate")
    elif trick == 1:
        raw = raw.replace(b'"model"', b'"\\u006dodel"', 1)
        tags.append("escaped-key")
    elif trick == 2:
        cut = rng.randrange(max(1, len(raw)))
        raw = raw[:cut]
        tags.append("truncated")
    elif trick == 3:
        raw = raw.replace(b"16", rng.choice(ODD_NUMBERS).encode(), 1)
        tags.append("number")
    elif trick == 4:
        raw = raw + rng.choice([b"\xff\xfe", b"garbage", b"}", b"\x00"])
        tags.append("trailing")
    elif trick == 5:
        raw = rng.choice([b"", b"null", b"[]", b"5", b'"x"', b"\xff", b"{", b"{}"])
        tags.append("not-an-object")
    elif trick in (6, 7) and raw.startswith(b"{") and raw.endswith(b"}") and len(raw) > 2:
        # The control fields also written as keys inside a value (the searches for the top-level
        # members must prove which occurrence is the member), and with 7 a respelled duplicate too.
        raw = b'{"zz":{"model":"aria-opus-4.8","stream":true,"max_tokens":1},' + raw[1:]
        tags.append("nested-keys")
        if trick == 7:
            raw = raw[:-1] + b',"\\u006dodel":"aria-opus-4.8"}'
            tags.append("nested-and-escaped-duplicate")
    return raw


def headers_for(fmt: str, keys: dict[str, str], rng: random.Random, tags: list[str]) -> dict[str, str]:
    key = keys["Basic"] if fmt == "messages" else keys["Nova"]
    roll = rng.random()
    if roll < 0.05:
        key = rng.choice(
            [
                "none",
                "sk-cs4-short",
                "sk-cs4-" + "A" * 38,
                keys["Nova"] if fmt == "messages" else keys["Basic"],
            ]
        )
        tags.append("key")
    headers = {"content-type": "application/json"}
    if fmt == "messages":
        headers["x-api-key"] = key
        headers["anthropic-version"] = (
            "2023-06-01" if rng.random() > 0.05 else rng.choice(["", "1.0", "2023-06-01 x"])
        )
        if rng.random() < 0.1:  # judged per upstream kind (upstream.betas)
            headers["anthropic-beta"] = rng.choice(
                [
                    ",,,",
                    ", ,x",
                    "files-api-2025-04-14",
                    "x" * 6000,
                    "a," * 2000,
                    "claude-code-20250219,\tfiles-api-2025-04-14",
                ]
            )
            tags.append("betas")
    else:
        headers["authorization"] = f"Bearer {key}"
    if rng.random() < 0.1:  # session affinity's keys, hashed scoped by the key (upstream.affinity_key)
        name = rng.choice(["x-claude-code-session-id", "session-id", "session_id"])
        headers[name] = rng.choice(["", "s" * 7000, "0f5c2a4e-0000-4000-8000-000000000000", "a,b;c=d"])
        tags.append("session-header")
    if rng.random() < 0.1:  # W3C trace context: passed on only when well formed (issue 12)
        headers["traceparent"] = rng.choice(TRACEPARENTS)
        if rng.random() < 0.5:
            headers["tracestate"] = rng.choice(["a=b", "x" * 5000, "=,=,", "k=" + "v" * 600])
        tags.append("trace")
    return headers


TRACEPARENTS = [
    "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    "00-" + "A" * 32 + "-" + "B" * 16 + "-01",
    "ff-" + "0" * 32 + "-" + "0" * 16 + "-00",
    "00-zz",
    "",
    "00-" + "a" * 32 + "-" + "b" * 16 + "-01-" + "x" * 6000,
    "00-" + "a" * 32 + "-" + "b" * 16 + "-01,00-" + "c" * 32 + "-" + "d" * 16 + "-01",
]
#: The fuzz gateway's ``metrics.token`` (tests/fuzz/test_hostile.py).
METRICS_TOKEN = "fuzz-metrics-token-0123456789"


PATHS = {"messages": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}


def model_requests(keys: dict[str, str], rng: random.Random) -> Iterator[Hostile]:
    while True:
        fmt = rng.choice(["messages", "chat", "responses"])
        tags: list[str] = [fmt]
        body = valid(fmt, rng)
        for _ in range(rng.randint(1, 3)):
            body = mutate(fmt, body, rng, tags)
        path = PATHS[fmt]
        if fmt == "messages" and rng.random() < 0.15:
            path = "/v1/messages/count_tokens"
        yield Hostile("POST", path, headers_for(fmt, keys, rng, tags), encode(body, rng, tags),
                      "messages" if fmt == "messages" else "openai", tags)  # fmt: skip


ADMIN_PATHS = [
    "/admin/api/accounts/%C2%B2", "/admin/api/accounts/9223372036854775808", "/admin/api/accounts/-1",
    "/admin/api/accounts?limit=%C2%B2", "/admin/api/accounts?limit=99999999999999999999", "/admin/api/keys?account_id=x",
    "/admin/api/keys/key_%00", "/admin/api/usage?month=2026-13", "/admin/api/usage/records?cursor=%FF",
    "/admin/api/usage/records?from=not-a-date", "/admin/api/usage/daily?month=%C2%B2", "/admin/api/tokens/..%2f..",
    "/admin/api/usage/records.csv?limit=-5", "/admin/api/usage/top-keys?limit=1e9", "/admin/api/me?x=" + "y" * 5000,
    "/admin/api/usage/quality?from=not-a-date", "/admin/api/usage/quality?key_id=key_%00",
    "/admin/api/usage/quality?from=2026-12-31&to=2026-01-01", "/admin/api/usage/quality?status=" + "s" * 5000,
    "/admin/api/usage/quality?account_id=9223372036854775808",
    "/admin/api/keys?after=%FF", "/admin/api/keys?after=1e400~key_a", "/admin/api/keys?after=99999999999999999~k",
    "/admin/api/keys?limit=%C2%B2", "/admin/api/keys?q=%00%25%5C", "/admin/api/keys?q=" + "q" * 5000,
    "/admin/api/keys?q=%27%20OR%201%3D1--", "/admin/api/keys?after=1.0~" + "k" * 101,
    # The search's trigram index (FTS5 on SQLite): its query syntax must stay plain text.
    "/admin/api/keys?q=%22", "/admin/api/keys?q=%22%20OR%20%22", "/admin/api/keys?q=NEAR(a%20b)",
    "/admin/api/keys?q=id%3Akey", "/admin/api/keys?q=*", "/admin/api/keys?q=%5Eabc*", "/admin/api/keys?q=a%22b%22c",
    "/admin/api/keys?q=%C4%B0%C4%B0", "/admin/api/keys?q=%F0%9F%98%80%F0%9F%98%80", "/admin/api/keys?q=%E2%80%AEabc",
    "/admin/api/keys?q=%25%25%25&account_id=1", "/admin/api/keys?q=%5C%5C%5C&after=1.0~key_a", "/admin/api/keys?q=" + "%22" * 100,
    "/admin/api/providers/%00", "/admin/api/providers/" + "x" * 5000, "/admin/api/models/%FF/price",
    "/admin/api/models/..%2f/deployments", "/admin/api/models/aria-haiku-4.5/price?effective_from=%FF",
    "/admin/api/sso/callback?code=%00&state=" + "s" * 5000, "/admin/api/sso/login?invite=%FF%FE",
    "/admin/api/sso/session", "/admin/api/sso?x=" + "y" * 5000,
    "/admin/api/audit?since=not-a-date", "/admin/api/audit?until=2026-02-30", "/admin/api/audit?since=99999-01-01",
    "/admin/api/audit?since=2026-01-01T25:61:00Z", "/admin/api/audit?since=2027-01-01&until=2026-01-01",
    "/admin/api/audit?limit=99999999999999999999", "/admin/api/audit?limit=0", "/admin/api/audit?limit=%C2%B2",
    "/admin/api/audit?cursor=-1", "/admin/api/audit?cursor=%FF", "/admin/api/audit?action=DROP%20TABLE",
    "/admin/api/audit?actor=%00", "/admin/api/audit?target=" + "t" * 5000, "/admin/api/audit?account_id=x",
    "/admin/api/audit?format=csv&since=%2B1", "/admin/api/audit?since=1970-01-01T00:00:00%2B99:99",
    "/admin/api/accounts/1/ledger?limit=1e9", "/admin/api/accounts/1/ledger?cursor=%C2%B2",
    "/admin/api/accounts/1/ledger?format=csv&cursor=99999999999999999999", "/admin/api/accounts/%C2%B2/ledger",
    "/admin/api/accounts/1/statement?month=2026-13", "/admin/api/accounts/1/statement?month=%3D1%2B1",
    "/admin/api/accounts/1/statement?month=9999-12", "/admin/api/accounts/9223372036854775808/statement",
    "/admin/api/accounts/1/statement?month=0000-01&format=csv", "/admin/api/accounts/0/alerts",
    "/dashboard/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/dashboard/..%2fapp.js", "/dashboard/%00", "/dashboard/a/b/c.js",
]  # fmt: skip
#: The one route table on admin paths: odd template segments, unknown paths, any method.
ADMIN_ROUTE_PATHS = [
    "/admin/api", "/admin/api/", "/admin/api//keys", "/admin/api/keys/a:b", "/admin/api/keys/a:b/rotate",
    "/admin/api/keys/%2F/revoke", "/admin/api/accounts/1/members/%00", "/admin/api/accounts/1/topups/x",
    "/admin/api/tokens/tok_x/revoke/", "/admin/api/openapi.json/x", "/admin/api/" + "s/" * 2000,
    "/dashboard/", "/dashboard/key/x", "/dashboard/" + "d" * 5000,
]  # fmt: skip
ADMIN_BODIES: list[tuple[str, str, Any]] = [
    ("POST", "/admin/api/accounts", {"name": "x", "credits": "10000000000000"}),
    ("POST", "/admin/api/accounts", {"name": 5}),
    ("POST", "/admin/api/accounts", {"name": "z", "credits_uc": 2**64}),
    ("POST", "/admin/api/accounts/1/topups", {"amount": "5000000000000"}),
    ("POST", "/admin/api/accounts/1/topups", {"amount": "１２"}),
    ("POST", "/admin/api/accounts/1/topups", {"amount_uc": -5}),
    ("POST", "/admin/api/accounts/1/topups", {"amount": "1e5"}),
    ("POST", "/admin/api/keys", {"account_id": 2**70, "group": "Pro"}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "monthly_cap": "10000000000000"}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "monthly_cap_uc": 10**30}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Gold"}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "rpm": 10**12}),
    ("POST", "/admin/api/tokens", {"expires_in": "forever"}),
    ("PATCH", "/admin/api/keys/key_nope", {"rpm": "x"}),
    ("POST", "/admin/api/keys/key_nope/rotate", {"grace_seconds": 1e300}),
    ("PATCH", "/admin/api/accounts/1", {"name": ""}),
    ("PATCH", "/admin/api/accounts/1", {"name": 5}),
    ("PATCH", "/admin/api/accounts/1", {"name": "n" * 10_000}),
    ("PATCH", "/admin/api/accounts/1", {"name": "   "}),
    ("PATCH", "/admin/api/accounts/1", {"name": "ok", "balance_uc": 10**9}),
    ("PATCH", "/admin/api/accounts/9223372036854775808", {"name": "far"}),
    ("PATCH", "/admin/api/accounts/%C2%B2", {"name": "odd"}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "tpm": -5}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "tpm": 0}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "tpm": 2**63}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "tpm": "abc"}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "tpm": 1.5}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "max_concurrency": True}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "max_concurrency": -1}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "max_concurrency": 10**30}),
    ("PATCH", "/admin/api/keys/key_nope", {"tpm": "5h=abc"}),
    ("PATCH", "/admin/api/keys/key_nope", {"max_concurrency": [1]}),
    # Spend caps by window (admin.spend_caps): keys and accounts.
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "caps": {"day": "-1"}}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "caps": {"year": "1"}}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "caps": {"5h": "１"}}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "caps_uc": {"week": 2**64}}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "caps": {"month": "1"}}),
    ("POST", "/admin/api/keys", {"account_id": 1, "group": "Pro", "caps": {"day": "1"}, "caps_uc": {"day": 1}}),
    ("PATCH", "/admin/api/keys/key_nope", {"caps": "day=5"}),
    ("PATCH", "/admin/api/keys/key_nope", {"caps": {"5h": 1e300}}),
    ("PATCH", "/admin/api/accounts/1", {"caps": {"week": "1e5"}}),
    ("PATCH", "/admin/api/accounts/1", {"caps": {"": "1"}}),
    ("PATCH", "/admin/api/accounts/1", {"caps_uc": {"month": -5}}),
    ("PATCH", "/admin/api/accounts/1", {"caps_uc": {"day": True}}),
    ("PATCH", "/admin/api/accounts/1", {"caps": None, "caps_uc": None}),
    ("PATCH", "/admin/api/accounts/9223372036854775808", {"caps": {"day": "1"}}),
    # An account's rate limits (PATCH /admin/api/accounts/{id}).
    ("PATCH", "/admin/api/accounts/1", {"rpm": 0}),
    ("PATCH", "/admin/api/accounts/1", {"rpm": 10**12}),
    ("PATCH", "/admin/api/accounts/1", {"tpm": -1}),
    ("PATCH", "/admin/api/accounts/1", {"tpm": 2**63}),
    ("PATCH", "/admin/api/accounts/1", {"tpm": "1e5"}),
    ("PATCH", "/admin/api/accounts/1", {"max_concurrency": True}),
    ("PATCH", "/admin/api/accounts/1", {"max_concurrency": 1.5}),
    ("PATCH", "/admin/api/accounts/1", {"max_concurrency": {"$gt": 1}}),
    ("PATCH", "/admin/api/accounts/9223372036854775808", {"rpm": 5}),
    # Upstreams (admin.providers, admin.model_routes): none of these may change anything.
    ("POST", "/admin/api/providers", {"name": "x" * 300, "kind": "openai", "api_key": "sk-fuzz-0123456789"}),
    ("POST", "/admin/api/providers", {"name": "p", "kind": "openai", "api_key": ["k"] * 100}),
    ("POST", "/admin/api/providers", {"name": "p", "kind": "anthropic", "api_key": 5}),
    ("POST", "/admin/api/providers", {"name": "p", "kind": "anthropic", "api_key": " padded-key-value "}),
    ("POST", "/admin/api/providers", {"name": "p", "kind": "bedrock", "region": "nowhere-1", "aws_credentials": [{"access_key_id": "A" * 5}]}),
    ("POST", "/admin/api/providers", {"name": "p", "kind": "bedrock", "aws_credentials": "all"}),
    ("POST", "/admin/api/providers", {"name": "p", "kind": "openai", "api_key": "sk-fuzz-0123456789", "timeouts": {"connect": -1}}),
    ("POST", "/admin/api/providers", {"name": "p", "kind": "openai", "api_key": "sk-fuzz-0123456789", "base_url": "ftp://x"}),
    ("POST", "/admin/api/providers", {"name": "p", "kind": {"$gt": 1}}),
    ("POST", "/admin/api/providers", {"name": None, "kind": "simulator"}),
    ("POST", "/admin/api/providers", {"name": "p", "kind": "openai", "api_key_env": "stored:x:api_key:0"}),
    ("POST", "/admin/api/providers", {"name": "simulator", "kind": "simulator"}),
    ("POST", "/admin/api/providers", {"name": "\u0000p", "kind": "simulator"}),
    ("PUT", "/admin/api/providers/simulator", {"kind": "nonsense"}),
    ("PUT", "/admin/api/providers/simulator", {"kind": "simulator", "name": "other"}),
    ("PATCH", "/admin/api/providers/simulator", {"max_concurrency": -1}),
    ("PATCH", "/admin/api/providers/simulator", {"headers": {"x": 5}}),
    ("DELETE", "/admin/api/providers/simulator", {}),
    ("DELETE", "/admin/api/providers/nope", {}),
    ("POST", "/admin/api/providers/simulator/test", {"model": 5}),
    ("POST", "/admin/api/providers/simulator/test", {"other": "x"}),
    ("POST", "/admin/api/providers/nope/test", {}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/deployments", {"deployments": [{"provider": "ghost", "upstream_model": "m"}]}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/deployments", {"deployments": [{"provider": "simulator", "upstream_model": "m", "weight": 0}]}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/deployments", {"deployments": "all"}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/deployments", {"deployments": [{}] * 100}),
    ("PUT", "/admin/api/models/%00/deployments", {"deployments": []}),
    ("DELETE", "/admin/api/models/aria-haiku-4.5/deployments", {}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/price", {"input": "NaN"}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/price", {"input": "sNaN"}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/price", {"input": "Infinity"}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/price", {"input": "1e400"}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/price", {"input": "-0.5"}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/price", {"input": "0.0000001"}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/price", {"input": 1, "effective_from": "yesterday"}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/price", {"input": 1, "effective_from": 1e308}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/price", {"input": 1, "effective_from": -5}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/price", {"input": [1]}),
    ("PUT", "/admin/api/models/aria-haiku-4.5/price", {}),
    ("PUT", "/admin/api/models/no-such-model/price", {"input": 1}),
    ("DELETE", "/admin/api/models/aria-haiku-4.5/price", {}),
    ("PUT", "/admin/api/aliases/%00", {"target": "aria-haiku-4.5"}),
    ("PUT", "/admin/api/aliases/x", {"target": "nova-5.5", "extra": 1}),
    ("PUT", "/admin/api/aliases/x", {"target": "no-such-model"}),
    ("PUT", "/admin/api/aliases/aria-opus-5", {"target": "aria-haiku-4.5"}),
    ("PUT", "/admin/api/aliases/" + "a" * 300, {"target": "aria-haiku-4.5"}),
    ("DELETE", "/admin/api/aliases/opus", {}),
    ("DELETE", "/admin/api/aliases/never-made", {}),
    ("POST", "/admin/api/invites", {"account_id": 1, "role": "king"}),
    ("POST", "/admin/api/invites", {"account_id": 2**70}),
    ("POST", "/admin/api/invites", {"account_id": 1, "email": "e" * 10_000}),
    ("POST", "/admin/api/invites", {"account_id": "1", "token": "mg-inv-mine"}),
    ("DELETE", "/admin/api/invites/%00", {}),
    ("DELETE", "/admin/api/invites/" + "i" * 5000, {}),
    ("PATCH", "/admin/api/accounts/1/members/person_%00", {"role": 5}),
    ("PATCH", "/admin/api/accounts/1/members/x", {"role": "owner", "account_id": 2}),
    ("DELETE", "/admin/api/accounts/%C2%B2/members/x", {}),
    ("POST", "/admin/api/accounts/1/adjustments", {"amount": "-1e5", "note": "x"}),
    ("POST", "/admin/api/accounts/1/adjustments", {"amount_uc": -(2**70), "note": "x"}),
    ("POST", "/admin/api/accounts/1/adjustments", {"amount_uc": 0, "note": "x"}),
    ("POST", "/admin/api/accounts/1/adjustments", {"amount_uc": 5}),
    ("POST", "/admin/api/accounts/1/adjustments", {"amount": "--5", "note": "=cmd"}),
    ("POST", "/admin/api/accounts/1/adjustments", {"amount": "1", "amount_uc": 1, "note": "both"}),
    ("POST", "/admin/api/accounts/1/adjustments", {"amount_uc": -5, "note": "n" * 10_000}),
    ("PUT", "/admin/api/accounts/1/alerts", {"low_balance": "-1"}),
    ("PUT", "/admin/api/accounts/1/alerts", {"low_balance_uc": 2**64}),
    ("PUT", "/admin/api/accounts/1/alerts", {"low_balance": "1", "low_balance_uc": 1}),
    ("PUT", "/admin/api/accounts/1/alerts", {"threshold": 5}),
]  # fmt: skip
#: Credentials /health reads (public view without one, details with an operator token).
HEALTH_CREDENTIALS = [
    "", "Bearer", "Bearer mg-op-forged", "Bearer mg-acct-forged", "Basic mg-op-x", "Bearer " + "x" * 6000,
    "Bearer mg-op-" + "z" * 400, "bearer\tmg-op-x",
]  # fmt: skip


def other_requests(keys: dict[str, str], admin: str, rng: random.Random) -> Iterator[Hostile]:
    while True:
        roll = rng.randrange(7)
        auth = {"authorization": f"Bearer {admin}"}
        if roll == 0 and rng.random() < 0.7:
            yield Hostile("GET", rng.choice(ADMIN_PATHS), auth, shape="admin", tags=["admin-path"])
        elif roll == 0:
            method = rng.choice(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"])
            shape = "none" if method == "HEAD" else "admin"
            yield Hostile(method, rng.choice(ADMIN_ROUTE_PATHS), auth, shape=shape, tags=["admin-route"])
        elif roll == 1:
            method, path, body = rng.choice(ADMIN_BODIES)
            raw = json.dumps(body).encode() if rng.random() > 0.2 else b"{" + b"[" * 300
            yield Hostile(
                method, path, {**auth, "content-type": "application/json"}, raw, "admin", ["admin-body"]
            )
        elif roll == 2:
            method = rng.choice(["GET", "PUT", "DELETE", "OPTIONS", "PATCH", "HEAD"])
            path = rng.choice(
                [
                    "/v1/messages",
                    "/v1/chat/completions",
                    "/v1/responses",
                    "/v1/nope",
                    "/nope",
                    "/v1/models/%FF",
                ]
            )
            shape = "messages" if path.startswith("/v1/messages") else "openai"
            yield Hostile(
                method,
                path,
                {"authorization": f"Bearer {keys['Nova']}"},
                shape="none" if method == "HEAD" else shape,
                tags=["method"],
            )
        elif roll == 3:
            model = rng.choice(["aria-haiku-4.5", "haiku", "nova-5.5", "x" * 300, "%00", "..%2F"])
            yield Hostile(
                "GET", f"/v1/models/{model}", {"x-api-key": keys["Basic"]}, shape="messages", tags=["models"]
            )
        elif roll == 4:
            headers = {
                "x-api-key": keys["Basic"],
                "authorization": "Bearer nonsense",
                "anthropic-version": "2023-06-01",
            }
            yield Hostile(
                "GET",
                "/v1/models?limit=%FF&after_id=" + "x" * 2000,
                headers,
                shape="messages",
                tags=["models-list"],
            )
        elif roll == 5 and rng.random() < 0.5:
            yield Hostile("POST", "/admin/api/accounts/1/topups", {"authorization": "Bearer mg-op-forged"}, b"{}", "admin", ["admin-auth"])  # fmt: skip
        elif roll == 5:
            credential = rng.choice([*HEALTH_CREDENTIALS, "Bearer " + keys["Basic"]])
            headers = {"authorization": credential} if credential else {}
            yield Hostile("GET", "/health", headers, shape="none", tags=["health"])
        else:
            credential = rng.choice(
                [
                    "",
                    "Bearer",
                    "Bearer " + METRICS_TOKEN[:-1],
                    "Bearer  " + METRICS_TOKEN,
                    "bearer " + METRICS_TOKEN,
                    "Basic " + METRICS_TOKEN,
                    "Bearer " + "x" * 6000,
                    "Bearer " + keys["Nova"],
                ]
            )
            method = rng.choice(["GET", "GET", "HEAD", "POST"])
            shape = "none" if method == "HEAD" else "openai"
            yield Hostile(
                method, "/metrics?x=%FF", {"authorization": credential}, shape=shape, tags=["metrics"]
            )


ODD_IDS = [
    "resp_1",
    "resp_" + "f" * 48,
    "%FF",
    "%00",
    "..%2F..",
    "x" * 3000,
    "conv_%C2%B2",
    "msg_1",
    " ",
    "resp_1%2Fx",
]
STATE_QUERIES = [
    "",
    "?limit=0",
    "?limit=101",
    "?limit=-1",
    "?limit=1e3",
    "?limit=" + "9" * 5000,
    "?order=sideways",
    "?after=%FF",
    "?after=" + "a" * 4000,
    "?include[]=x&stream=true",
    "?stream=true",
    "?order=asc&limit=1",
    "?after=msg_1&order=asc&limit=100",
    "?after=msg_1&order=desc",
    "?after=",
]
STATE_BODIES: list[Any] = [
    {}, {"items": 5}, {"items": [5]}, {"items": [{}]}, {"items": [{"type": "item_reference", "id": "msg_1"}]},
    {"items": [{"id": 5, "type": "message", "role": "user", "content": "x"}]},
    {"items": [{"type": "message", "role": "user", "content": "x"}] * 21}, {"items": []},
    {"items": [{"type": "message", "role": "user", "content": "x", "id": "i" * 300}]},
    {"metadata": 5}, {"metadata": {"a": 5}}, {"metadata": {str(n): "v" for n in range(17)}},
    {"metadata": {"k" * 65: "v"}}, {"metadata": {"k": "v" * 513}}, {"metadata": None},
    {"metadata": {f"k{n:02d}": "v" * 512 for n in range(16)}},
    {"items": [{"role": "user", "content": [5, {"type": "input_text"}]}], "metadata": {"a": "b"}},
]  # fmt: skip


def state_requests(keys: dict[str, str], rng: random.Random) -> Iterator[Hostile]:
    """Stored responses and conversations: odd ids, queries, methods and bodies."""
    while True:
        key = rng.choice([keys["Nova"], keys["Nova"], keys["Nova"], keys["Basic"], "nonsense"])
        auth = {"authorization": f"Bearer {key}"}
        ident = rng.choice(ODD_IDS)
        roll = rng.randrange(4)
        if roll == 0:
            path = rng.choice(
                [
                    f"/v1/responses/{ident}",
                    f"/v1/responses/{ident}/input_items",
                    f"/v1/responses/{ident}/cancel",
                    f"/v1/responses/{ident}/x/y",
                    "/v1/responses/",
                ]
            )
            method = rng.choice(["GET", "DELETE", "POST", "PUT"])
            yield Hostile(method, path + rng.choice(STATE_QUERIES), auth, tags=["state-responses"])
        elif roll == 1:
            path = rng.choice(
                [
                    f"/v1/conversations/{ident}",
                    f"/v1/conversations/{ident}/items",
                    f"/v1/conversations/{ident}/items/{rng.choice(ODD_IDS)}",
                    "/v1/conversations/",
                ]
            )
            method = rng.choice(["GET", "DELETE", "POST", "PATCH"])
            yield Hostile(method, path + rng.choice(STATE_QUERIES), auth, tags=["state-conversations"])
        else:
            path = rng.choice(
                ["/v1/conversations", f"/v1/conversations/{ident}", f"/v1/conversations/{ident}/items"]
            )
            body = rng.choice(STATE_BODIES)
            raw = json.dumps(body).encode()
            tags = ["state-body"]
            if rng.random() < 0.3:
                raw = encode(dict(body), rng, tags)
            headers = {**auth, "content-type": "application/json"}
            yield Hostile("POST", path, headers, raw, tags=tags)


#: Gemini API paths: hostile models and methods in the path (decoded by the server before
#: routing: ``%2F`` becomes ``/``), and hostile query strings (the key and ``alt`` live there).
GEMINI_MODELS = [
    "aria-haiku-4.5", "aria-haiku-4.5", "aria-sonnet-4.6", "nova-5.5", "..%2F..", "models%2Faria-haiku-4.5",
    "%00", "%FF", "x" * 3000, "aria-haiku-4.5%3AcountTokens", "a/b", "", "%20", "nova-5.5%0D%0Ax-a: b",
]  # fmt: skip
GEMINI_METHODS = [
    "generateContent", "generateContent", "streamGenerateContent", "countTokens", "embedContent",
    "GENERATECONTENT", "generateContent:x", "", "batchGenerateContent",
]  # fmt: skip
GEMINI_QUERIES = [
    "", "alt=json", "alt=" + "s" * 5000, "alt=sse&alt=json", "key=", "key=%FF", "key=sk-cs4-short",
    "&".join(f"p{i}=x" for i in range(400)), "%FF=%FF", "x=" + "%" * 3000, "pageSize=-1", "$fields=a",
]  # fmt: skip
GEMINI_PARTS: list[Any] = [
    {"text": 5}, {"text": "x", "inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
    {"inlineData": {"mimeType": 5, "data": "!!"}}, {"inlineData": {"mimeType": "image/png", "data": "@@@"}},
    {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}}, {"inlineData": 5},
    {"fileData": {"fileUri": 5}}, {"fileData": {"mimeType": "image/png", "fileUri": "gs://b/x.png"}},
    {"functionCall": {"name": 5, "args": "x"}}, {"functionCall": {"name": "f", "args": [1], "id": 5}},
    {"functionResponse": {"name": None, "response": 5}}, {"functionResponse": {"name": "f", "response": {}}},
    {"thought": "yes", "text": "x"}, {"thoughtSignature": 5, "text": "x"}, {"thought": True, "text": "t"},
    {"executableCode": {"code": 5}}, {"codeExecutionResult": {}}, {}, 5, None, [], "text",
    {"text": "a", "text_": "b"}, {"text": "x", "video_metadata": {"fps": "x"}},
]  # fmt: skip
GEMINI_FIELDS: list[tuple[str, list[Any]]] = [
    ("contents", [5, None, {}, [], [5], [{"role": 5}], [{"role": "system", "parts": [{"text": "x"}]}],
                  [{"role": "model", "parts": []}], [{"parts": 5}], [{"role": "user", "parts": "hi"}]]),
    ("systemInstruction", [5, "x", {"parts": 5}, {"parts": [{"text": 5}]}, {"role": "user", "parts": [None]}]),
    ("generationConfig", [5, [], {"maxOutputTokens": -1}, {"maxOutputTokens": 0}, {"maxOutputTokens": 2**40},
                          {"maxOutputTokens": "16"}, {"maxOutputTokens": 1.5}, {"candidateCount": 2},
                          {"temperature": 5}, {"topP": -1}, {"topK": "x"}, {"stopSequences": "x"},
                          {"responseMimeType": 5}, {"responseSchema": 5}, {"thinkingConfig": {"thinkingBudget": -5}},
                          {"thinkingConfig": {"thinkingLevel": "ultra"}}, {"responseModalities": ["AUDIO"]},
                          {"maxOutputTokens": 16, "max_output_tokens": 16}, {"seed": 2**70}]),
    ("generation_config", [5, {"max_output_tokens": 10**30}]),
    ("tools", [5, [5], [{}], [{"functionDeclarations": 5}], [{"functionDeclarations": [{"name": 5}]}],
               [{"functionDeclarations": [{"name": "f", "parameters": 5}]}], [{"googleSearch": 5}],
               [{"googleSearch": {}}], [{"codeExecution": {}}], [{"googleSearchRetrieval": {}}], [{"urlContext": {}}]]),
    ("toolConfig", [5, {"functionCallingConfig": {"mode": "NOPE"}}, {"functionCallingConfig": 5},
                    {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [5]}}]),
    ("safetySettings", [5, [{"category": 5, "threshold": None}]]),
    ("cachedContent", ["cachedContents/x", 5]),
    ("labels", [5, {"a": 5}]),
]  # fmt: skip


def gemini_body(rng: random.Random, tags: list[str]) -> bytes:
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": "hello there"}]}],
        "generationConfig": {"maxOutputTokens": 16},
    }
    for _ in range(rng.randint(1, 3)):
        roll = rng.randrange(5)
        if roll < 2:
            name, values = rng.choice(GEMINI_FIELDS)
            body[name] = rng.choice(values)
            tags.append(f"gemini-field:{name}")
        elif roll == 2:
            parts = [rng.choice(GEMINI_PARTS) for _ in range(rng.randint(1, 3))]
            body["contents"] = [{"role": rng.choice(["user", "model", "function", 5]), "parts": parts}]
            tags.append("gemini-parts")
        elif roll == 3:
            body["generateContentRequest"] = rng.choice([5, {}, {"contents": 5}, dict(body)])
            tags.append("gemini-count-wrapper")
        else:
            depth = rng.choice([100, 260, 600])
            body["labels"] = json.loads("[" * depth + "]" * depth)
            tags.append(f"depth:{depth}")
    return encode(body, rng, tags)


def gemini_requests(keys: dict[str, str], rng: random.Random) -> Iterator[Hostile]:
    """The Gemini API's routes: hostile path models and methods, query strings, bodies, keys
    in ``x-goog-api-key`` or ``?key=``; refusals in Google's shape."""
    while True:
        tags = ["gemini"]
        version = rng.choice(["v1beta", "v1"])
        key = rng.choice([keys["Basic"], keys["Basic"], keys["Nova"], "sk-cs4-" + "A" * 38, "nonsense"])
        query = [rng.choice(GEMINI_QUERIES)] if rng.random() < 0.4 else []
        headers = {"content-type": "application/json"}
        if rng.random() < 0.1:
            tags.append("no-key")
        elif rng.random() < 0.5:
            headers["x-goog-api-key"] = key
        else:
            query.append(f"key={key}")
        if rng.random() < 0.15:
            tail = rng.choice(["", "/" + rng.choice(GEMINI_MODELS), "/aria-haiku-4.5"])
            query.append(rng.choice(["pageSize=" + rng.choice(["1", "0", "-5", "1e9", "9" * 30]), "pageToken=%FF",
                                     "pageToken=" + "x" * 4000, "pageToken=bzU"]))  # fmt: skip
            path = f"/{version}/models{tail}?" + "&".join(query)
            # /v1/models and /v1/models/{id} are shared: a client that sends no key the Gemini
            # way (header or ?key=) is answered as an OpenAI one; a colon in the path is Gemini's.
            claimed = "x-goog-api-key" in headers or any(q.startswith("key=") for q in query)
            shared = version == "v1" and "%3A" not in tail
            shape = "openai" if shared and not claimed else "google"
            yield Hostile("GET", path, headers, shape=shape, tags=[*tags, "gemini-models"])
            continue
        method = rng.choice(GEMINI_METHODS)
        if method == "streamGenerateContent" and rng.random() < 0.8:
            query.append("alt=sse")
        path = f"/{version}/models/{rng.choice(GEMINI_MODELS)}:{method}"
        if query:
            path += "?" + "&".join(query)
        http_method = "POST" if rng.random() < 0.95 else rng.choice(["GET", "PUT", "DELETE"])
        yield Hostile(http_method, path, headers, gemini_body(rng, tags), "google", tags)


def hostile_requests(keys: dict[str, str], admin: str, seed: int) -> Iterator[Hostile]:
    """An endless mix: about two in three aim at the model endpoints, one in ten at the Gemini
    API, one in ten at stored state, one in twenty at a key's own view and rules
    (``hostile_keys``, when ``keys`` has its keys)."""
    from tests.fuzz.hostile_keys import key_requests

    rng = random.Random(seed)
    models = model_requests(keys, rng)
    others = other_requests(keys, admin, rng)
    state = state_requests(keys, rng)
    gemini = gemini_requests(keys, rng)
    own = key_requests(keys, admin, rng) if "Restricted" in keys else others
    while True:
        roll = rng.random()
        if roll < 0.1:
            yield next(gemini)
            continue
        if roll < 0.75:
            yield next(models)
        elif roll < 0.85:
            yield next(state)
        else:
            yield next(own) if roll >= 0.95 else next(others)

"""Session affinity without sockets: the session key (precedence, scoping by gateway key, the
prefix fingerprint's stability across turns), the pin table (idle expiry, the bound) and the
router's placement (pins, weights across sessions, failure over pins) against scripted providers.

Credentials of a pool are exercised through the real gateway in test_affinity_gateway.py.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from modelgate.upstream.affinity import AffinityTable
from modelgate.upstream.affinity_key import body_session, session_key
from modelgate.upstream.base import Deployment
from modelgate.upstream.config import RoutingConfig
from modelgate.upstream.router import Router
from tests.fakes.scripted import RecordedSleep, Respond, ScriptedProvider
from tests.upstream.test_router import Clock, build

CLAUDE_MD = "<system-reminder>\n# CLAUDE.md\n" + "Use uv, never pip. " * 300 + "\n</system-reminder>"
SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.a1f; cch=0f3a1;"},
    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Environment: " + "cwd=/src " * 200, "cache_control": {"type": "ephemeral"}},
]
TOOLS = [{"name": n, "input_schema": {"type": "object"}} for n in ("Bash", "Read", "Edit")]


def claude_turns(prompt: str, turns: int) -> dict[str, Any]:
    """A Messages body as Claude Code sends turn ``turns``: the cache breakpoint on the last
    user message only (it moves every turn)."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": CLAUDE_MD}, {"type": "text", "text": prompt}]}
    ]
    for i in range(1, turns):
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]})
        messages.append({"role": "user", "content": [{"type": "text", "text": f"follow-up {i}"}]})
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {"model": "m", "max_tokens": 10, "system": SYSTEM, "tools": TOOLS, "messages": messages}


def test_key_precedence_headers_then_prompt_cache_key_then_user_id_then_prefix() -> None:
    body = {**claude_turns("fix the bug", 1), "prompt_cache_key": "thread-1", "metadata": {"user_id": "u1"}}
    full = {"x-claude-code-session-id": "cc-1", "session-id": "s-1", "session_id": "s_1"}

    def key(headers: dict[str, str], body: dict[str, Any]) -> bytes:
        return session_key("key-a", headers, body)

    assert key(full, body) == key({"x-claude-code-session-id": "cc-1"}, {})
    assert key({"session-id": "s-1", "session_id": "s_1"}, body) == key({"session-id": "s-1"}, {})
    assert key({"session_id": "s_1"}, body) == key({"session_id": "s_1"}, {})
    assert key({}, body) == key({}, {"prompt_cache_key": "thread-1"})
    no_cache_key = {k: v for k, v in body.items() if k != "prompt_cache_key"}
    assert key({}, no_cache_key) == key({}, {"metadata": {"user_id": "u1"}})
    bare = claude_turns("fix the bug", 1)
    assert key({}, bare) not in {key({}, {"metadata": {"user_id": "u1"}}), key({}, {"prompt_cache_key": "x"})}
    # A large body's key computed in a worker (the hint) is the same key.
    assert key({}, bare) == session_key("key-a", {}, {}, body_session(bare))
    # Each source is its own namespace: the same string in two places is not the same session.
    assert key({"session-id": "x"}, {}) != key({}, {"prompt_cache_key": "x"})


def test_keys_are_scoped_by_gateway_key() -> None:
    headers = {"x-claude-code-session-id": "cc-1"}
    assert session_key("key-a", headers, {}) != session_key("key-b", headers, {})
    body = claude_turns("fix the bug", 3)
    assert session_key("key-a", {}, body) != session_key("key-b", {}, body)


def test_prefix_fingerprint_is_stable_across_turns_and_tells_sessions_apart() -> None:
    first = body_session(claude_turns("fix the bug", 1))
    assert body_session(claude_turns("fix the bug", 2)) == first
    assert body_session(claude_turns("fix the bug", 8)) == first  # the breakpoint moved every turn
    # Same CLAUDE.md (the first block of the first message), another question: another session.
    assert body_session(claude_turns("write the docs", 1)) != first
    other_system = claude_turns("fix the bug", 1) | {"system": "You are another agent."}
    assert body_session(other_system) != first
    other_tools = claude_turns("fix the bug", 1) | {"tools": TOOLS[:2]}
    assert body_session(other_tools) != first
    # Responses: instructions and the whole first user turn (every leading user item).
    items = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "AGENTS.md"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "task one"}]},
    ]
    later = [
        *items,
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    assert body_session({"input": items}) == body_session({"input": later})
    other_task = [*items[:2], {"type": "message", "role": "user", "content": "task two"}]
    assert body_session({"input": other_task}) != body_session({"input": items})
    # Gemini: systemInstruction, functionDeclarations and the first user content's parts.
    gemini = {
        "systemInstruction": {"parts": [{"text": "rules"}]},
        "tools": [{"functionDeclarations": [{"name": "shell"}]}],
        "contents": [{"role": "user", "parts": [{"text": "GEMINI.md"}, {"text": "task one"}]}],
    }
    turn_two = gemini | {
        "contents": [
            *gemini["contents"],
            {"role": "model", "parts": [{"text": "done"}]},
            {"role": "user", "parts": [{"text": "and now?"}]},
        ]
    }
    assert body_session(gemini) == body_session(turn_two)
    other = gemini | {"contents": [{"role": "user", "parts": [{"text": "GEMINI.md"}, {"text": "task two"}]}]}
    assert body_session(other) != body_session(gemini)
    assert body_session(gemini | {"tools": [{"functionDeclarations": [{"name": "edit"}]}]}) != body_session(
        gemini
    )


def test_pins_expire_when_idle_and_the_table_keeps_its_bound() -> None:
    clock = Clock()
    table = AffinityTable(ttl=600.0, max_entries=3, clock=clock)
    a, b = Deployment("a", "x"), Deployment("b", "x")
    assert table.served("m", b"s1", None, a, "k0") == "miss"
    pin = table.get("m", b"s1")
    assert pin is not None and (pin.deployment, pin.credential) == (a, "k0")
    assert table.served("m", b"s1", pin, a, "k0") == "hit"
    assert table.served("m", b"s1", table.get("m", b"s1"), b, None) == "repinned"
    assert table.get("other-model", b"s1") is None  # pins are per model
    clock.now += 599.0
    assert table.get("m", b"s1") is not None
    clock.now += 1.0
    assert table.get("m", b"s1") is None  # idle for the ttl: forgotten
    assert table.counts.expired == 1 and len(table) == 0
    for i in range(5):
        clock.now += 1.0
        table.served("m", f"s{i}".encode(), None, a, None)
        if i == 2:
            table.served("m", b"s0", table.get("m", b"s0"), a, None)  # s0 used again: kept
    assert len(table) == 3 and table.counts.evicted == 2
    assert {s for s in (b"s0", b"s1", b"s2", b"s3", b"s4") if table.get("m", s)} == {b"s0", b"s3", b"s4"}
    clock.now += 600.0
    table.served("m", b"s9", None, a, None)  # a write sweeps the idle ones from the front
    assert len(table) == 1 and table.counts.expired == 4


def router(
    providers: list[ScriptedProvider], deployments: list[Deployment], clock: Clock | None = None, **cfg: Any
) -> Router:
    return Router(
        {p.name: p for p in providers},
        {"m": deployments},
        RoutingConfig.model_validate(cfg),
        clock=clock or Clock(),
        rng=random.Random(3),
        sleep=RecordedSleep(),
    )


async def served_by(r: Router, session: bytes) -> str:
    attempt = await r.open("m", build, stream=False, client_headers={}, session=session)
    await attempt.reply.close()
    return attempt.deployment.provider


async def test_sessions_stay_put_and_new_sessions_spread_by_weight() -> None:
    heavy, light = ScriptedProvider("heavy"), ScriptedProvider("light")
    deps = [Deployment("heavy", "x", weight=3), Deployment("light", "x", weight=1)]
    r = router([heavy, light], deps)
    other = router([ScriptedProvider("heavy"), ScriptedProvider("light")], deps)  # another instance
    placed: Counter[str] = Counter()
    for i in range(400):
        session = session_key("key", {"session-id": f"s{i}"}, {})
        first = await served_by(r, session)
        assert [await served_by(r, session) for _ in range(3)] == [first] * 3
        assert await served_by(other, session) == first  # instances agree without sharing state
        placed[first] += 1
    assert 0.68 <= placed["heavy"] / 400 <= 0.82  # weight 3 of 4, across sessions
    table = r.affinity
    assert table is not None and (table.counts.miss, table.counts.hit, table.counts.repinned) == (
        400,
        1200,
        0,
    )


async def test_failure_beats_a_pin_and_the_session_repins_to_what_served_it() -> None:
    clock = Clock()
    a = ScriptedProvider("a")
    b = ScriptedProvider("b")
    deps = [Deployment("a", "x"), Deployment("b", "x")]
    r = router([a, b], deps, clock=clock, failures_to_cooldown=1, cooldown=30.0)
    sessions = [session_key("key", {"session-id": f"s{i}"}, {}) for i in range(40)]
    on_a = [s for s in sessions if await served_by(r, s) == "a"]
    assert 5 <= len(on_a) <= 35
    a.default = Respond.error(503)
    sent_to_a = a.count
    # The first pinned session meets the failure and fails over within its request; a cools down.
    assert await served_by(r, on_a[0]) == "b"
    assert a.count == sent_to_a + 1
    # Every other session pinned to a now skips it without a try: a cooling deployment is never
    # chosen because of a pin.
    assert [await served_by(r, s) for s in on_a[1:]] == ["b"] * (len(on_a) - 1)
    assert a.count == sent_to_a + 1
    table = r.affinity
    assert table is not None and table.counts.repinned == len(on_a)
    # a recovers; the re-pinned sessions stay where their cache now is.
    a.default = Respond.message()
    clock.now += 31.0
    assert [await served_by(r, s) for s in on_a] == ["b"] * len(on_a)


async def test_affinity_off_routes_each_request_alone() -> None:
    r = router([ScriptedProvider("a"), ScriptedProvider("b")], [Deployment("a", "x"), Deployment("b", "x")],
               affinity="off")  # fmt: skip
    assert r.affinity is None
    assert r.session_of(_Request("m", "key", {"session-id": "s"}, _Facts({}, None))) is None
    seen = {await served_by(r, b"same-session") for _ in range(30)}
    assert seen == {"a", "b"}


def test_a_model_with_nothing_to_choose_gets_no_session_key() -> None:
    single = router([ScriptedProvider("a")], [Deployment("a", "x")])
    assert single.session_of(_Request("m", "key", {"session-id": "s"}, _Facts({}, None))) is None
    pair = router(
        [ScriptedProvider("a"), ScriptedProvider("b")], [Deployment("a", "x"), Deployment("b", "x")]
    )
    key = pair.session_of(_Request("m", "key", {"session-id": "s"}, _Facts({}, None)))
    assert key == session_key("key", {"session-id": "s"}, {})


class _Facts:
    def __init__(self, body: dict[str, Any], hint: bytes | None) -> None:
        self.body = body
        self.session_hint = hint


class _Named:
    def __init__(self, id: str, headers: dict[str, str] | None = None) -> None:
        self.id = id
        self.headers = headers or {}


class _Request:
    """The parts of an admitted request that ``Router.session_of`` reads."""

    def __init__(self, model: str, key: str, headers: dict[str, str], facts: _Facts) -> None:
        self.model, self.key = _Named(model), _Named(key)
        self.exchange = _Named("", headers)
        self.facts = facts


@pytest.mark.parametrize(
    "setting", [{"affinity": "sticky"}, {"affinity_ttl_seconds": 0}, {"affinity_max_sessions": 0}]
)
def test_bad_affinity_settings_are_refused(setting: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="affinity"):
        RoutingConfig.model_validate(setting)

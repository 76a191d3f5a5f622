"""The spans of a body written as the serialiser writes it back (``body_scan.canonical_spans``):
when they are given they are the byte scan's, and a body they cannot prove (a key written twice,
in another spelling, values written differently) is left to the searches and the scan, which
decide as before."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelgate import errors
from modelgate.billing.input_bound import MediaRules
from modelgate.gateway.bodies import BodyRules, analyse, analyse_in_worker
from modelgate.gateway.body_scan import canonical_spans, quick_spans, scan_object

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet='ab"\\/{}[]:,\u001b\u2028\u00e9 ', max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["model", "a", '"{']), inner, max_size=3)
    ),
    max_leaves=12,
)
bodies = st.dictionaries(
    st.sampled_from(["model", "max_tokens", "stream", "messages", "x", "mödel"]), values, max_size=5
)
RULES = BodyRules(64, MediaRules(10, 1600, 750, 85, 1600, 100, 400), 5)


def _encode(body: dict[str, Any], style: int) -> bytes:
    if style == 0:
        return orjson.dumps(body)
    if style == 1:  # whitespace between the top-level tokens only
        members = ",\n  ".join(
            f"{orjson.dumps(k).decode()} : {orjson.dumps(v).decode()}" for k, v in body.items()
        )
        return f" {{ {members} }} ".encode()
    if style == 2:
        return json.dumps(body, indent=1).encode()  # nested whitespace and \\u escapes
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _hostile(raw: bytes, body: dict[str, Any], how: int) -> bytes:
    """``raw`` with a top-level key written a second time: plainly, respelled, or with a number
    written on after a value."""
    if not body:
        return raw
    key, value = next(iter(body.items()))
    tail = raw.rstrip()[:-1]
    if how == 0:  # the same member again, same value: the parse is the same dict
        return tail + b"," + orjson.dumps(key) + b":" + orjson.dumps(value) + b"}"
    if how == 1:  # again, its first letter escaped
        first = f"\\u{ord(key[0]):04x}".encode()
        return tail + b',"' + first + key[1:].encode() + b'":' + orjson.dumps(value) + b"}"
    return tail + b',"zz":1e2}'  # a number the serialiser writes otherwise (100.0)


@settings(max_examples=500, deadline=None)
@given(body=bodies, style=st.integers(0, 3), how=st.integers(-1, 2))
def test_canonical_spans_are_the_scans_or_nothing(body: dict[str, Any], style: int, how: int) -> None:
    raw = _encode(body, style)
    if how >= 0:
        raw = _hostile(raw, body, how)
    parsed = orjson.loads(raw)
    spans = canonical_spans(raw, parsed)
    layout = scan_object(raw, 1000)
    if spans is not None:
        assert spans == layout.spans()
        assert layout.duplicated(frozenset(parsed)) is None
        for key, (start, end) in spans.items():
            assert orjson.loads(raw[start:end]) == parsed[key]
    if body and how in (0, 1):  # a key twice at the top level: never answered
        assert spans is None
    if how < 0 and style in (0, 1) and all(type(v) is not float for v in parsed.values()):
        assert spans is not None  # compact values, as agents send them: the fast path holds


def test_what_the_serialiser_writes_otherwise_is_not_proved() -> None:
    for raw in (
        b'{"a\\/b":1}',  # a slash escaped
        b'{"\\u006dodel":"m"}',  # a key respelled
        b'{"model":"m","n":1E2}',  # a float in another notation
        b'{"model":"m","n":99999999999999999999}',  # an integer read as a float
        b'{"model":"m","messages":[1, 2]}',  # whitespace inside a value
        b'{"model":"b","messages":[1],"model":"b"}',  # a duplicate after the large value
        b'{"model":"m"} ',
    ):
        parsed = orjson.loads(raw)
        spans = canonical_spans(raw, parsed)
        if raw.endswith(b" "):
            assert spans == {"model": (9, 12)}
        else:
            assert spans is None, raw


def test_a_large_agent_body_is_proved_without_the_searches() -> None:
    turn = {"role": "tool", "tool_call_id": "c", "content": 'x \u001b[0m "q" \\ é\n' * 40}
    body = {"model": "m", "max_tokens": 5, "messages": [turn] * 500, "tools": [{"name": "model"}]}
    raw = orjson.dumps(body)
    spans = canonical_spans(raw, body)
    assert spans is not None and spans == quick_spans(raw, body) == scan_object(raw, 10).spans()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}',
        b'{ "model" : "m" , "messages" : [ {"role": "user", "content": "hi"} ], "max_tokens": 5 }',
        b'{"model":"m","messages":[{"role":"user","content":"\\u0068i"}],"max_tokens":5}',
    ],
)
def test_the_worker_answers_as_inline_whichever_proof_holds(raw: bytes) -> None:
    offloaded = analyse_in_worker(raw, "chat", False, RULES)
    inline = analyse(raw, "chat", False, RULES)
    assert offloaded.spans == scan_object(raw, 10).spans()
    assert offloaded.input_bound == inline.input_bound
    assert offloaded.invalid == inline.invalid
    assert offloaded.body == {k: inline.body[k] for k in offloaded.body}


def test_a_control_field_twice_is_refused_in_the_worker_as_inline() -> None:
    raw = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"model":"m"}'
    for analysis in (analyse, analyse_in_worker):
        with pytest.raises(errors.InvalidRequest, match="given more than once"):
            analysis(raw, "chat", False, RULES)


def test_a_body_above_the_size_for_writing_back_first_gets_the_same_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Either order of the two proofs gives the same spans, and a body neither proves goes to the
    scan (here: a control field twice, refused)."""
    from modelgate.gateway import bodies

    raw = b'{"model":"m","messages":[{"role":"user","content":"a \\u001b[0m"}],"max_tokens":5}'
    twice = b'{"model":"m","messages":[{"model":"m"}],"model":"m"}'
    small_first = analyse_in_worker(raw, "chat", False, RULES)
    monkeypatch.setattr(bodies, "CANONICAL_FIRST_BYTES", 0)
    assert analyse_in_worker(raw, "chat", False, RULES) == small_first
    assert small_first.spans == scan_object(raw, 10).spans()
    with pytest.raises(errors.InvalidRequest, match="given more than once"):
        analyse_in_worker(twice, "chat", False, RULES)

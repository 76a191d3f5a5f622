"""Byte-exact splicing of top-level fields: the fast path must agree with the full tokenizer."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from modelgate.gateway.body import splice_top_level, top_level_spans

scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["model", "max_tokens", "a"]), inner, max_size=3)
    ),
    max_leaves=8,
)
bodies = st.dictionaries(
    st.sampled_from(["model", "max_tokens", "stream", "messages", "x", "mödel"]), values, max_size=5
)
changes = st.dictionaries(
    st.sampled_from(["model", "max_tokens", "stream_options"]), scalars, min_size=1, max_size=3
)


def _encode(body: dict[str, Any], style: int) -> bytes:
    if style == 0:
        return orjson.dumps(body)
    if style == 1:
        return json.dumps(body, indent=1).encode()  # whitespace and \\u escapes (ensure_ascii)
    return json.dumps(body, separators=(", ", " : "), ensure_ascii=False).encode()


@settings(max_examples=400, deadline=None)
@given(body=bodies, edit=changes, style=st.integers(0, 2))
def test_fast_splice_equals_tokenizer_splice(body: dict[str, Any], edit: dict[str, Any], style: int) -> None:
    raw = _encode(body, style)
    fast = splice_top_level(raw, edit, parsed=body)
    slow = splice_top_level(raw, edit)
    assert fast == slow
    assert orjson.loads(fast) == {**body, **edit}
    # Everything the gateway does not own is byte-identical: the spans of untouched keys survive.
    untouched = {k for k in body if k not in edit}
    before = top_level_spans(raw)
    after = top_level_spans(fast)
    for key in untouched:
        token = json.dumps(key, ensure_ascii=style == 1)[1:-1].encode()
        b, a = before[token], after[token]
        assert raw[b[0] : b[1]] == fast[a[0] : a[1]]


def test_nested_keys_are_never_touched() -> None:
    raw = b'{"tools":[{"input_schema":{"model":"sonnet"}}], "model" :"sonnet","max_tokens":64000}'
    out = splice_top_level(raw, {"model": "up-1", "max_tokens": 100}, parsed=orjson.loads(raw))
    assert out == b'{"tools":[{"input_schema":{"model":"sonnet"}}], "model" :"up-1","max_tokens":100}'

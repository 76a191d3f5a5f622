"""The one-pass scan of a large body (``body_scan.scan_object``) agrees with the parser and the
full tokenizer: the same top-level members (escaped keys decoded, duplicates kept), the same
depth verdict as the walk over the parsed value, and a splice from its spans equal to the others."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from modelgate.billing.input_bound import MEDIA_TYPES, MediaRules, input_bound
from modelgate.gateway.body import duplicate_key, shape, splice_top_level, too_deep, top_level_members
from modelgate.gateway.body_scan import QUICK_KEYS, decoded_key, quick_spans, scan_object

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet='ab"\\{}[]:,\u001b\u00e9 ', max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["model", "max_tokens", "a]", '"{']), inner, max_size=3)
    ),
    max_leaves=12,
)
bodies = st.dictionaries(
    st.sampled_from(["model", "max_tokens", "stream", "messages", "x", "mödel", "{["]), values, max_size=5
)


def _encode(body: dict[str, Any], style: int) -> bytes:
    if style == 0:
        return orjson.dumps(body)
    if style == 1:
        return json.dumps(body, indent=1).encode()  # whitespace and \\u escapes (ensure_ascii)
    return json.dumps(body, separators=(", ", " : "), ensure_ascii=False).encode()


@settings(max_examples=400, deadline=None)
@given(body=bodies, style=st.integers(0, 2), limit=st.integers(1, 6))
def test_scan_agrees_with_tokenizer_and_parser(body: dict[str, Any], style: int, limit: int) -> None:
    raw = _encode(body, style)
    full = scan_object(raw, 1000)
    assert full.members == [(decoded_key(k), span) for k, span in top_level_members(raw)]
    assert not full.too_deep
    assert scan_object(raw, limit).too_deep == too_deep(orjson.loads(raw), limit)
    for key, (start, end) in full.members:
        assert orjson.loads(raw[start:end]) == body[key]


@settings(max_examples=200, deadline=None)
@given(body=bodies, style=st.integers(0, 2), model=st.text(max_size=5), limit=st.integers(1, 9))
def test_splice_from_spans_equals_the_others(
    body: dict[str, Any], style: int, model: str, limit: int
) -> None:
    raw = _encode(body, style)
    edit = {"model": model, "max_tokens": limit}
    spans = scan_object(raw, 1000).spans()
    spliced = splice_top_level(raw, edit, spans=spans)
    assert spliced == splice_top_level(raw, edit)
    assert orjson.loads(spliced) == {**body, **edit}


def test_duplicates_are_found_however_the_key_is_spelled() -> None:
    raw = b'{"messages":[{"model":"a"}],"model":"x", "\\u006dodel" :"y","\\u006D\\u006fdel":"z"}'
    layout = scan_object(raw, 8)
    assert layout.duplicated(frozenset({"model"})) == "model"
    assert [key for key, _ in layout.members] == ["messages", "model", "model", "model"]
    assert layout.duplicated(frozenset({"messages"})) is None


def test_nesting_is_counted_outside_strings_only() -> None:
    raw = b'{"a":"[[[[[[[[\\"]]]","b":[[["{{{{"]]]}'
    assert not scan_object(raw, 4).too_deep
    assert scan_object(raw, 3).too_deep
    assert scan_object(b"{}", 1).members == []


@settings(max_examples=200, deadline=None)
@given(body=bodies, style=st.integers(0, 2), twice=st.sampled_from(["model", "max_tokens", "x"]))
def test_duplicate_check_agrees_with_the_scan(body: dict[str, Any], style: int, twice: str) -> None:
    """The count-based fast path (kept for escaped control characters) never misses a duplicate."""
    raw = _encode(body, style)
    spelled = b'"\\u006dodel"' if twice == "model" and style == 1 else orjson.dumps(twice)
    doubled = raw[:-1] + (b"," if body else b"") + spelled + b':"\\u001b"}'
    keys = frozenset({"model", "max_tokens", "stream"})
    expected = scan_object(doubled, 1000).duplicated(keys)
    assert duplicate_key(doubled, orjson.loads(doubled), keys) == expected
    assert (expected is not None) == (twice in body and twice in keys)


@settings(max_examples=400, deadline=None)
@given(body=bodies, style=st.integers(0, 2), twice=st.sampled_from(["", "model", "messages"]))
def test_quick_spans_are_the_scans_when_given(body: dict[str, Any], style: int, twice: str) -> None:
    raw = _encode(body, style)
    if twice:  # the same key again at the top level, or inside a nested value
        raw = (
            raw[:-1]
            + (b"," if body else b"")
            + b'"x":{"'
            + twice.encode()
            + b'":1},"'
            + twice.encode()
            + b'":2}'
        )
    parsed = orjson.loads(raw)
    quick = quick_spans(raw, parsed)
    layout = scan_object(raw, 1000)
    if quick is not None:
        assert quick == layout.spans()
        assert layout.duplicated(frozenset(parsed)) is None
    if twice and (twice in body or "x" in body):  # a key twice at the top level: never answered
        assert quick is None


@settings(max_examples=300, deadline=None)
@given(body=bodies, style=st.integers(0, 2), model=st.text(max_size=5), limit=st.integers(1, 9))
def test_a_splice_from_some_of_the_fields_loses_no_member(
    body: dict[str, Any], style: int, model: str, limit: int
) -> None:
    """An offloaded body's callers know only its control fields: the spans found from those alone
    may run over the members between them, which the read-back catches."""
    raw = _encode(body, style)
    parsed = orjson.loads(raw)
    some = {k: v for k, v in parsed.items() if k in ("model", "max_tokens", "stream")}
    edit = {"model": model, "max_tokens": limit}
    spliced = splice_top_level(raw, edit, parsed=some)
    assert orjson.loads(spliced) == {**parsed, **edit}
    assert spliced == splice_top_level(raw, edit, spans=scan_object(raw, 1000).spans())


def test_quick_spans_prove_keys_also_written_inside_values() -> None:
    """A Claude-Code-shaped body: a top-level ``thinking`` beside thinking blocks, a tool whose
    parameter is called ``model``, an escaped ``<`` in a text: the spans are the scan's."""
    block = b'{"type":"thinking","thinking":"hm \\u003cb\\u003e","signature":"s"}'
    tool = b'{"name":"Task","input_schema":{"properties":{"model":{"type":"string"}}}}'
    raw = (
        b'{"model":"claude","messages":[{"role":"assistant","content":['
        + b",".join([block] * 50)
        + b']}],"tools":['
        + tool
        + b'],"thinking":{"type":"adaptive"},"max_tokens":5}'
    )
    spans = quick_spans(raw, orjson.loads(raw))
    assert spans is not None and spans == scan_object(raw, 10).spans()
    assert raw[slice(*spans["thinking"])] == b'{"type":"adaptive"}'


def test_a_respelled_key_beside_nested_ones_is_left_to_the_scan() -> None:
    # The top-level "thinking" is written escaped; the only plain ones are nested: no proof holds.
    raw = b'{"messages":[{"thinking":"a"}],"\\u0074hinking":{"type":"adaptive"}}'
    assert quick_spans(raw, orjson.loads(raw)) is None
    raw = b'{"model":"a","messages":[{"model":"b"}],"\\u006dodel":"c"}'  # and a duplicate
    assert quick_spans(raw, orjson.loads(raw)) is None
    assert scan_object(raw, 10).duplicated(frozenset({"model"})) == "model"


def test_quick_spans_find_a_huge_members_end_without_scanning_it() -> None:
    raw = (
        b'{"model" : "m", "messages":['
        + b'{"role":"user","content":"a \\u001b[0m \\"x\\""},' * 1000
        + b'1] ,\n"max_tokens":5 }'
    )
    spans = quick_spans(raw, orjson.loads(raw))
    assert spans is not None and spans == scan_object(raw, 10).spans()
    start, end = spans["messages"]
    assert raw[start:end].startswith(b"[{") and raw[start:end].endswith(b"1]")


def test_quick_spans_refuse_a_key_in_another_spelling_beside_a_key_written_twice() -> None:
    # "a/b" written with the short escape \/ is not found as "a/b", while "m" is found twice (once
    # nested): as many occurrences as keys, but not one of each.
    raw = b'{"a\\/b":1,"x":{"m":1},"m":2}'
    assert quick_spans(raw, orjson.loads(raw)) is None
    assert scan_object(raw, 10).spans() == {"a/b": (8, 9), "x": (14, 21), "m": (26, 27)}


def test_quick_spans_leave_a_body_of_very_many_keys_to_the_scan() -> None:
    raw = orjson.dumps({f"k{i}": i for i in range(QUICK_KEYS + 1)})
    assert quick_spans(raw, orjson.loads(raw)) is None
    assert len(scan_object(raw, 10).spans()) == QUICK_KEYS + 1


media_parts = st.sampled_from(
    [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "input_file", "file_id": "file-1"},
        {"type": "document", "source": {"type": "text", "data": "plain"}},
        {"type": "text", "text": '"image" "file_data"'},  # a marker in text, no media
        {"type": ["image"]},  # a type that is not a string
    ]
)
shaped = st.recursive(
    scalars | media_parts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["content", "type"]), inner),
    max_leaves=10,
)


@settings(max_examples=400, deadline=None)
@given(value=shaped, limit=st.integers(1, 6))
def test_one_walk_gives_the_depth_and_the_media_bound(value: Any, limit: int) -> None:
    """``shape`` agrees with the depth walk, and the input bound it lets skip the media search is
    the one computed with the search: the hold stays the same true upper bound."""
    body = {"model": "m", "messages": [value]}
    raw = orjson.dumps(body)
    deep, media = shape(body, limit, MEDIA_TYPES)
    assert deep == too_deep(body, limit)
    _, media = shape(body, 1000, MEDIA_TYPES)
    rules = MediaRules(10, 1600, 750, 85, 1600, 100, 400)
    assert input_bound(raw, body, rules, media=media) == input_bound(raw, body, rules)


def test_a_large_splice_is_the_same_joined_in_pieces() -> None:
    """Above ``JOIN_IN_PIECES_BYTES`` the splice is joined from bytes pieces (so the copy releases
    the GIL): the same bytes as one join of the views."""
    from modelgate.gateway import body

    text = "é\u001b[0m \\ x" * ((body.JOIN_IN_PIECES_BYTES // 10) + 7)
    raw = orjson.dumps({"model": "a", "messages": [{"role": "user", "content": text}], "max_tokens": 5})
    edit = {"model": "b", "max_tokens": 9, "stream": True}
    spans = scan_object(raw, 10).spans()
    spliced = splice_top_level(raw, edit, spans=spans)
    assert len(raw) > body.JOIN_IN_PIECES_BYTES
    assert orjson.loads(spliced) == {**orjson.loads(raw), **edit}
    start, end = spans["messages"]
    assert spliced.count(raw[start:end]) == 1

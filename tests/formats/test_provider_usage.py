"""What the provider bills, read from its usage reports (issue #27): Messages ``iterations``,
1-hour cache writes and server web searches; Responses ``web_search_call`` items."""

from __future__ import annotations

from typing import Any

import pytest

from modelgate import ir
from modelgate.billing.server_tools import web_search_bound
from modelgate.formats.messages.response import encode_response
from modelgate.formats.messages.wire import decode_usage
from modelgate.formats.responses.wire import response_usage


def test_threshold_compaction_bills_every_pass_once() -> None:
    """The documented example: the top level is the message pass; the compaction pass is extra."""
    usage = decode_usage(
        {
            "input_tokens": 23000,
            "output_tokens": 1000,
            "iterations": [
                {"type": "compaction", "input_tokens": 180000, "output_tokens": 3500},
                {"type": "message", "input_tokens": 23000, "output_tokens": 1000},
            ],
        }
    )
    assert (usage.input_tokens, usage.output_tokens) == (203000, 4500)


def test_on_demand_compaction_with_zero_top_level_bills_the_passes() -> None:
    usage = decode_usage(
        {
            "input_tokens": 0,
            "output_tokens": 0,
            "iterations": [
                {
                    "type": "compaction",
                    "input_tokens": 900,
                    "output_tokens": 80,
                    "cache_read_input_tokens": 4000,
                    "cache_creation_input_tokens": 300,
                    "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
                }
            ],
        }
    )
    assert usage == ir.Usage(900, 80, 300, 4000, 0, 200, 0)


def test_a_pass_without_a_kind_leaves_the_top_level_figure_standing() -> None:
    usage = decode_usage(
        {
            "input_tokens": 50,
            "output_tokens": 5,
            "cache_read_input_tokens": 7000,
            "iterations": [
                {"type": "compaction", "input_tokens": 100, "output_tokens": 10},
                {"type": "message", "input_tokens": 50, "output_tokens": 5},
            ],
        }
    )
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens) == (150, 15, 7000)


def test_stream_usage_merges_the_start_split_and_the_final_delta() -> None:
    """``message_start`` carries the 1-hour split; the final ``message_delta`` the cumulative
    counts, the searches and the passes (without a split)."""
    usage = decode_usage(
        {
            "input_tokens": 10,
            "output_tokens": 1,
            "cache_creation_input_tokens": 500,
            "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 300},
            "server_tool_use": None,
        }
    )
    decode_usage(
        {
            "input_tokens": 10,
            "output_tokens": 40,
            "cache_creation_input_tokens": 500,
            "server_tool_use": {"web_search_requests": 4, "web_fetch_requests": 1},
            "iterations": [
                {"type": "compaction", "input_tokens": 70, "output_tokens": 6},
                {
                    "type": "message",
                    "input_tokens": 10,
                    "output_tokens": 40,
                    "cache_creation_input_tokens": 500,
                },
            ],
        },
        usage,
    )
    assert usage == ir.Usage(80, 46, 500, 0, 0, 300, 4)


@pytest.mark.parametrize(
    "hostile",
    [
        {"iterations": "x", "cache_creation": 5, "server_tool_use": []},
        {"iterations": [5, None, {"input_tokens": -3, "cache_creation": "x"}], "input_tokens": 2},
        {
            "cache_creation": {"ephemeral_1h_input_tokens": True},
            "server_tool_use": {"web_search_requests": -1},
        },
        {"server_tool_use": {"web_search_requests": 1.5}, "iterations": [{"output_tokens": "9"}]},
    ],
)
def test_hostile_usage_reads_as_zero_never_negative(hostile: dict[str, Any]) -> None:
    usage = decode_usage(hostile)
    figures = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_creation_input_tokens,
        usage.cache_read_input_tokens,
        usage.cache_write_1h_input_tokens,
        usage.web_search_requests,
    )
    assert all(f >= 0 for f in figures)
    assert usage.cache_write_1h_input_tokens <= usage.cache_creation_input_tokens


def test_responses_count_web_search_call_items() -> None:
    body = {
        "usage": {"input_tokens": 20, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 0}},
        "output": [
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type": "web_search_call", "id": "ws_2", "status": "completed"},
            {"type": "message", "content": []},
            "junk",
        ],
    }
    usage = response_usage(body)
    assert (usage.input_tokens, usage.output_tokens, usage.web_search_requests) == (20, 3, 2)
    assert response_usage(None) == ir.Usage()


@pytest.mark.parametrize(
    ("tools", "bound"),
    [
        (None, 0),
        ("x", 0),
        ([{"type": "function", "name": "f"}], 0),
        ([{"type": "web_search_20250305", "name": "web_search"}], 10),
        ([{"type": "web_search_20250305", "max_uses": 4}], 4),
        ([{"type": "web_search_20250305", "max_uses": 4}, {"type": "web_search_20260209", "max_uses": 3}], 7),
        ([{"type": "web_search_20250305", "max_uses": 40}], 10),
        ([{"type": "web_search_20250305", "max_uses": 2}, {"type": "web_search"}], 10),
        ([{"type": "web_search_20250305", "max_uses": True}], 10),
        ([{"type": "web_search_20250305", "max_uses": -1}], 10),
        ([{"type": "web_search_preview"}], 10),
        ([{"type": "web_fetch_20250910"}], 0),
    ],
)
def test_the_web_search_bound(tools: Any, bound: int) -> None:
    assert web_search_bound({"tools": tools}, 10) == bound


def test_a_messages_answer_reports_the_split_and_the_searches_it_was_billed_for() -> None:
    usage = ir.Usage(
        10, 2, cache_creation_input_tokens=500, cache_write_1h_input_tokens=300, web_search_requests=2
    )
    body = encode_response(ir.Response("msg_1", "aria-sonnet-4.6", [], ir.StopReason.END_TURN, usage))
    assert body["usage"]["cache_creation"] == {
        "ephemeral_5m_input_tokens": 200,
        "ephemeral_1h_input_tokens": 300,
    }
    assert body["usage"]["server_tool_use"] == {"web_search_requests": 2, "web_fetch_requests": 0}
    assert decode_usage(body["usage"]) == usage

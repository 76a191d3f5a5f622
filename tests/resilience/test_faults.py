"""Every scripted upstream fault, through a real gateway, judged by the official SDKs.

One gateway serves four routes against one fake upstream: Messages, Chat Completions and
Responses clients each on a same-dialect (passthrough) upstream, and a Messages client on an
``openai-compatible`` upstream (translated). Expected outcomes follow reference §4.8: upstream
5xx -> 502, overloaded -> 529 on Messages / 503 on OpenAI formats, timeout -> 504, unreachable
-> 503, 429 -> 429 with ``retry-after``, other 4xx relayed with status and message; a failure
after the stream began -> the format's in-band error event, never a silent cut.
"""

from __future__ import annotations

import pytest

from tests.fakes import Fault, Reply
from tests.fakes.upstream import Step
from tests.resilience.clients import Outcome, call
from tests.resilience.harness import (
    QUICK_ROUTING,
    SECRETS,
    rescript,
)
from tests.resilience.routes import ROUTES, Env


def _is_messages(route: str) -> bool:
    return ROUTES[route].fmt == "messages"


def _assert_clean(outcome: Outcome) -> None:
    for secret in SECRETS:
        assert secret not in outcome.raw and secret not in str(outcome.headers)
    assert outcome.headers.get("request-id", "").startswith("req_")


# --- failures before the first byte: an HTTP error in the client's format ----------------------

#: (fault, Messages status/type, OpenAI status/type/code)
BEFORE_FIRST_BYTE: dict[str, tuple[Step, tuple[int, str], tuple[int, str, str | None]]] = {
    "500": (Fault.status(500), (502, "api_error"), (502, "server_error", "upstream_error")),
    "503": (Fault.status(503), (502, "api_error"), (502, "server_error", "upstream_error")),
    "overloaded": (Fault.overloaded(), (529, "overloaded_error"), (503, "server_error", "overloaded")),
    "slow_first_byte": (
        Fault.slow_first_byte(1.5),
        (504, "timeout_error"),
        (504, "timeout", "timeout"),
    ),
    "drop": (Fault.drop(), (502, "api_error"), (502, "server_error", "upstream_error")),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("fault", list(BEFORE_FIRST_BYTE))
def test_failure_before_the_first_byte_is_an_http_error_in_the_client_format(
    env: Env, fault: str, route: str, stream: bool
) -> None:
    step, messages_expect, openai_expect = BEFORE_FIRST_BYTE[fault]
    rescript(env.fake, default=step)
    outcome = env.call(route, stream=stream)
    if _is_messages(route):
        assert (outcome.status, outcome.error_type) == messages_expect, outcome
    else:
        assert (outcome.status, outcome.error_type, outcome.error_code) == openai_expect, outcome
    assert not outcome.in_band and outcome.message
    # Retried up to max_attempts (2), never more.
    assert env.fake.count == QUICK_ROUTING["max_attempts"]
    _assert_clean(outcome)


@pytest.mark.parametrize("route", list(ROUTES))
def test_refused_connection_is_503(env: Env, route: str) -> None:
    r = ROUTES[route]
    outcome = call(env.gateway.base_url, env.keys[r.group], r.fmt, r.dead_model, stream=False)
    expected = "api_error" if r.fmt == "messages" else "server_error"
    assert (outcome.status, outcome.error_type) == (503, expected), outcome
    assert "cannot connect" in outcome.message and "127.0.0.1" not in outcome.message
    _assert_clean(outcome)


@pytest.mark.parametrize("route", list(ROUTES))
def test_429_with_retry_after_is_waited_for_then_succeeds(env: Env, route: str) -> None:
    rescript(env.fake, Fault.status(429, retry_after_ms=300), default=Reply(text="after the wait"))
    outcome = env.call(route, stream=False)
    assert outcome.status == 200 and outcome.text == "after the wait"
    # Asked twice, the same upstream: refused, then (after the wait it asked for) answered. How
    # long the router waits is asserted exactly, on an injected sleep, in
    # tests/upstream/test_router.py (test_retry_after_is_honoured_on_the_same_deployment).
    first, second = env.fake.requests
    assert first.path == second.path and second.finished


@pytest.mark.parametrize("route", list(ROUTES))
def test_429_with_a_long_retry_after_is_relayed_with_its_retry_after(env: Env, route: str) -> None:
    rescript(env.fake, default=Fault.status(429, retry_after=30))
    outcome = env.call(route, stream=False)
    expected = (
        ("rate_limit_error", None) if _is_messages(route) else ("rate_limit_error", "rate_limit_exceeded")
    )
    assert (outcome.status, outcome.error_type, outcome.error_code) == (429, *expected), outcome
    assert outcome.headers["retry-after"] == "30"
    assert env.fake.count == 1  # not worth holding the client for 30 s


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize(
    ("status", "messages_type", "openai_type"),
    [
        (400, "invalid_request_error", "invalid_request_error"),
        (404, "not_found_error", "invalid_request_error"),
        (422, "invalid_request_error", "invalid_request_error"),
    ],
)
def test_upstream_4xx_keeps_status_and_message(
    env: Env, route: str, status: int, messages_type: str, openai_type: str
) -> None:
    rescript(env.fake, default=Fault.status(status, message=f"upstream says no ({status})"))
    outcome = env.call(route, stream=True)
    expected_type = messages_type if _is_messages(route) else openai_type
    assert (outcome.status, outcome.error_type) == (status, expected_type), outcome
    assert outcome.message == f"upstream says no ({status})"
    assert env.fake.count == 1  # the request's own fault: never retried
    _assert_clean(outcome)


@pytest.mark.parametrize("route", list(ROUTES))
def test_malformed_json_body_is_502(env: Env, route: str) -> None:
    rescript(env.fake, default=Fault.malformed_json())
    outcome = env.call(route, stream=False)
    expected = "api_error" if _is_messages(route) else "server_error"
    assert (outcome.status, outcome.error_type) == (502, expected), outcome
    assert env.fake.count == 1  # a 200 was accepted: the body is not asked for again


# --- failures after the stream began: the in-band error, then the end ---------------------------

AFTER_FIRST_BYTE: dict[str, tuple[Step, str, str]] = {
    # fault, Messages error.type, OpenAI error.type
    "reset": (
        # event_delay: events before the reset reach the gateway before the RST discards them.
        Fault.reset_after(3, then=Reply(text="one two three four five six", chunks=6, event_delay=0.02)),
        "api_error",
        "server_error",
    ),
    "stall": (
        Fault.stall_after(3, seconds=5, then=Reply(text="one two three four five six", chunks=6)),
        "timeout_error",
        "timeout",
    ),
    "malformed_sse": (Fault.malformed_sse(after=3), "api_error", "server_error"),
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("fault", list(AFTER_FIRST_BYTE))
def test_failure_mid_stream_ends_with_the_in_band_error(env: Env, fault: str, route: str) -> None:
    step, messages_type, openai_type = AFTER_FIRST_BYTE[fault]
    rescript(env.fake, default=step)
    outcome = env.call(route, stream=True)
    assert outcome.status == 200 and outcome.in_band, outcome
    assert outcome.error_type == (messages_type if _is_messages(route) else openai_type), outcome
    assert outcome.events, "the client received events before the failure"
    assert env.fake.count == 1  # bytes were sent: never retried, never restarted
    if fault == "stall":
        # Ended by the idle timeout: the client had its error while the upstream was still in
        # its 5-second silence, and the gateway then hung up on it.
        assert not env.fake.requests[0].finished
        ended = env.gateway.call(env.fake.wait_ended(0), timeout=90)
        assert ended.disconnected_at is not None and not ended.finished
    _assert_clean(outcome)

"""Mid-stream failures and client disconnects, end to end: what the client sees, what the
upstream sees, and the usage record that settles it."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import openai
import pytest

from modelgate.billing.estimate import text_tokens
from modelgate.clock import month_of
from modelgate.storage.base import UsageRecord
from tests.fakes import Fault, Reply
from tests.gateway.clients import SdkClients
from tests.polling import POLL_TIMEOUT
from tests.resilience.clients import call
from tests.resilience.harness import rescript
from tests.resilience.routes import ROUTES, Env

#: Six-character pieces (the fake splits text evenly), so every delta is exactly one word.
WORDS = "alpha bravo delta gamma omega sigma"


def _record(env: Env, key_id: str, timeout: float = POLL_TIMEOUT) -> UsageRecord:
    """The key's only usage record, once settlement (which follows the stream's end) wrote it."""
    deadline = time.monotonic() + timeout
    while True:
        records = env.gateway.call(
            env.gateway.services.usage.usage_records(month_of(time.time()), key_id=key_id)
        )
        if records or time.monotonic() > deadline:
            assert len(records) == 1, records
            return records[0]
        time.sleep(0.02)


def _fresh_key(env: Env, group: str) -> tuple[str, str]:
    account = env.gateway.account(f"acct-{time.monotonic_ns()}", credits=100)
    issued = env.gateway.key(account, group, rpm=10_000)
    return issued.secret, issued.record.id


@pytest.mark.parametrize("route", list(ROUTES))
def test_reset_mid_stream_gives_the_in_band_error_and_bills_what_was_delivered(env: Env, route: str) -> None:
    r = ROUTES[route]
    rescript(env.fake, default=Fault.reset_after(5, then=Reply(text=WORDS, chunks=6, event_delay=0.02)))
    secret, key_id = _fresh_key(env, r.group)
    outcome = call(env.gateway.base_url, secret, r.fmt, r.model, stream=True)

    assert outcome.status == 200 and outcome.in_band and outcome.text, outcome
    assert WORDS.startswith(outcome.text) and outcome.text != WORDS
    assert env.fake.count == 1  # nothing restarted or duplicated
    record = _record(env, key_id)
    assert record.status == "upstream_failed_mid_stream"
    # Output estimated from what was relayed: one token per delivered word.
    assert record.output_tokens == text_tokens(outcome.text) == len(outcome.text.split())
    assert record.input_tokens > 0 and record.charged_uc > 0


@pytest.mark.parametrize("route", list(ROUTES))
def test_client_disconnect_mid_stream_cancels_the_upstream(env: Env, route: str, sdk: SdkClients) -> None:
    r = ROUTES[route]
    rescript(env.fake, default=Reply(text=" ".join(["word"] * 40), chunks=40, event_delay=0.1))
    secret, key_id = _fresh_key(env, r.group)
    stream: Any
    if r.fmt == "messages":
        stream = sdk.anthropic(env.gateway.base_url, secret).messages.create(
            model=r.model, max_tokens=64, messages=[{"role": "user", "content": "hi"}], stream=True
        )
    elif r.fmt == "chat":
        stream = sdk.openai(env.gateway.base_url, secret).chat.completions.create(
            model=r.model, messages=[{"role": "user", "content": "hi"}], stream=True
        )
    else:
        stream = sdk.openai(env.gateway.base_url, secret).responses.create(
            model=r.model, input="hi", stream=True
        )
    events = iter(stream)
    for _ in range(4):
        next(events)
    stream.close()  # the SDK drops the connection

    # The gateway hung up on the upstream before its 4-second reply could finish.
    ended = env.gateway.call(env.fake.wait_ended(0), timeout=90)
    assert ended.disconnected_at is not None and not ended.finished
    record = _record(env, key_id)
    assert record.status == "client_disconnected"
    assert record.charged_uc > 0  # input plus the output relayed before the disconnect


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("route", ["messages", "chat"])
def test_client_giving_up_before_the_first_byte_cancels_the_upstream(
    env: Env, route: str, stream: bool, sdk: SdkClients
) -> None:
    """Uvicorn does not cancel a handler when its client leaves; the gateway listens for the
    disconnect while it waits on the upstream and aborts the upstream request."""
    r = ROUTES[route]
    rescript(env.fake, default=Fault.slow_first_byte(10.0))
    secret, key_id = _fresh_key(env, r.group)
    # Longer than nothing, shorter than the provider's first-byte timeout (0.4 s): the client
    # leaves while the gateway is still waiting.
    timeout = 0.25
    with pytest.raises((anthropic.APITimeoutError, openai.APITimeoutError)):
        if r.fmt == "messages":
            client = sdk.anthropic(env.gateway.base_url, secret).with_options(timeout=timeout)
            client.messages.create(
                model=r.model, max_tokens=64, messages=[{"role": "user", "content": "hi"}], stream=stream
            )
        else:
            oclient = sdk.openai(env.gateway.base_url, secret).with_options(timeout=timeout)
            oclient.chat.completions.create(
                model=r.model, messages=[{"role": "user", "content": "hi"}], stream=stream
            )
    # The gateway hung up on the upstream while it held its first byte back (for 10 s).
    ended = env.gateway.call(env.fake.wait_ended(0), timeout=90)
    assert ended.disconnected_at is not None and not ended.finished
    assert env.fake.count == 1  # cancelled, not retried
    record = _record(env, key_id)
    assert record.status == "client_disconnected" and record.charged_uc == 0

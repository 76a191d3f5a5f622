"""An upstream that reports more usage than the hold covered (issue #11): the request is charged
its real cost as far as the account's free balance goes, never past it, and the usage record
keeps the shortfall for the operator."""

from __future__ import annotations

import httpx
import orjson

from modelgate.billing.pricing import cost_uc
from modelgate.ir import Usage
from tests.conformance.conftest import Wired, issue_key, usage_records
from tests.conformance.upstreams import Recorded


def test_usage_beyond_the_hold_is_charged_up_to_the_balance_and_the_rest_recorded(wired: Wired) -> None:
    reported = 5_000_000  # input tokens: far beyond what a 100-byte body can hold
    answer = {
        "id": "msg_up", "type": "message", "role": "assistant", "model": "claude-opus-4-8",
        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": reported, "output_tokens": 2},
    }  # fmt: skip
    wired.replay.answers.append(Recorded(orjson.dumps(answer), "application/json"))
    key, key_id = issue_key(wired.gateway, "Basic", credits=10)
    response = httpx.post(
        f"{wired.gateway.base_url}/v1/messages",
        json={"model": "aria-opus-4.8", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
    )
    assert response.status_code == 200
    model = wired.gateway.services.catalogue.resolve("aria-opus-4.8")
    assert model is not None
    cost = cost_uc(Usage(input_tokens=reported, output_tokens=2), model.price)
    [record] = usage_records(wired.gateway, key_id)
    assert record.charged_uc == 10_000_000 and record.shortfall_uc == cost - 10_000_000 > 0
    assert response.headers["x-modelgate-credits-charged"] == "10000000"
    assert response.headers["x-modelgate-balance-remaining"] == "0"

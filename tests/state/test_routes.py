"""Which upstream gets what, and what it costs: an upstream that keeps Responses state gets the
client's body as it is when it holds everything referred to, any other the history inline; an
``openai`` upstream the gateway keeps state for gets ``store: false``; history counts toward the
hold and is billed from the upstream's usage; retention sweeps; ``responses.store = "off"``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from tests.gateway.clients import SdkClients
from tests.gateway_server import running_gateway
from tests.state.conftest import CHAT_ONLY, FINAL, KEEPER, SIMULATED, TRANSLATED, ZDR, Stateful

from modelgate.billing.pricing import bound_uc

DAY = 86_400.0


def test_a_response_held_upstream_is_expanded_where_another_upstream_serves(
    stateful: Stateful, sdk: SdkClients
) -> None:
    secret, _ = stateful.key()
    client = sdk.openai(stateful.gateway.base_url, secret)
    held = client.responses.create(model=KEEPER, input="Hello keeper.")
    sent = stateful.sent(KEEPER)[-1].json()
    assert "store" not in sent  # the client's body, as it was (the upstream stores by default)
    # Continued on the keeper itself: passed through, the upstream resolves it.
    client.responses.create(model=KEEPER, input="Again.", previous_response_id=held.id)
    assert stateful.sent(KEEPER)[-1].json()["previous_response_id"] == held.id
    # Continued on a Chat-only upstream: the gateway's copy is expanded into messages.
    client.responses.create(model=CHAT_ONLY, input="Now you.", previous_response_id=held.id)
    messages = stateful.sent(CHAT_ONLY)[-1].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == held.output_text


def test_an_openai_upstream_without_state_gets_the_history_and_store_false(
    stateful: Stateful, sdk: SdkClients
) -> None:
    secret, _ = stateful.key()
    client = sdk.openai(stateful.gateway.base_url, secret)
    first = client.responses.create(model=ZDR, input="First turn.")
    assert stateful.sent(ZDR)[-1].json()["store"] is False
    assert client.responses.retrieve(first.id).to_dict()["store"] is True  # the gateway keeps it
    client.responses.create(model=ZDR, input="Second turn.", previous_response_id=first.id)
    body = stateful.sent(ZDR)[-1].json()
    assert "previous_response_id" not in body and body["store"] is False
    assert [i.get("role") for i in body["input"]] == ["user", "assistant", "user"]
    assert body["input"][1]["id"] == first.output[0].id  # the stored output item, replayed


def test_a_tool_loop_continues_by_previous_response_id_on_chat_and_messages_upstreams(
    stateful: Stateful, sdk: SdkClients
) -> None:
    secret, _ = stateful.key()
    client = sdk.openai(stateful.gateway.base_url, secret)
    tools: Any = [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    for model in (CHAT_ONLY, TRANSLATED):
        first = client.responses.create(model=model, input="Weather in Paris?", tools=tools)
        call: Any = next(i for i in first.output if i.type == "function_call")
        final = client.responses.create(
            model=model,
            previous_response_id=first.id,
            tools=tools,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny"}],
        )
        assert final.output_text == FINAL


def test_stored_history_counts_toward_the_hold_like_history_sent_inline(
    stateful: Stateful, sdk: SdkClients
) -> None:
    """An account that can afford the new turn but not the stored history behind it is refused,
    exactly as if the client had sent that history itself."""
    gateway = stateful.gateway
    secret, key_id = stateful.key(credits=1000)
    client = sdk.openai(gateway.base_url, secret)
    long_text = "word " * 40_000  # ~200 kB of history: ~200k tokens of input bound
    first = client.responses.create(model=SIMULATED, input=long_text)
    model = gateway.services.catalogue.resolve(SIMULATED)
    assert model is not None
    # Leave the account room for ~20k input tokens: the new turn fits, the history does not.
    account_id = stateful.account_id(key_id)
    account = gateway.call(gateway.services.accounts.get_account(account_id))
    assert account is not None
    room = bound_uc(20_000, 1, model.price)
    gateway.call(gateway.services.accounts.top_up(account_id, room - account.available_uc, "test", 0))
    assert client.responses.create(model=SIMULATED, input="short").status == "completed"
    with pytest.raises(openai.APIStatusError) as chained:
        client.responses.create(model=SIMULATED, input="short", previous_response_id=first.id)
    with pytest.raises(openai.APIStatusError) as inline:
        client.responses.create(
            model=SIMULATED,
            input=[
                {"role": "user", "content": long_text},
                {"role": "assistant", "content": first.output_text},
                {"role": "user", "content": "short"},
            ],
            store=False,
        )
    assert chained.value.status_code == inline.value.status_code == 402


def test_expanded_input_is_billed_from_the_upstreams_usage(stateful: Stateful, sdk: SdkClients) -> None:
    secret, key_id = stateful.key()
    client = sdk.openai(stateful.gateway.base_url, secret)
    first = client.responses.create(model=SIMULATED, input="one two three four five")
    second = client.responses.create(model=SIMULATED, input="six", previous_response_id=first.id)
    assert first.usage is not None and second.usage is not None
    # The simulator counts exactly what it was sent: the whole history plus the new turn.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    billed = sorted(r.input_tokens for r in stateful.usage(key_id, 2))
    assert billed == [first.usage.input_tokens, second.usage.input_tokens]


def test_large_requests_are_planned_and_expanded_in_worker_processes(
    stateful: Stateful, sdk: SdkClients
) -> None:
    """Past ``server.offload_body_bytes`` the input is planned, and the history expanded and
    checked, in worker processes (counted by the offload pool), never on the event loop."""
    secret, _ = stateful.key(credits=1000)
    client = sdk.openai(stateful.gateway.base_url, secret)
    offload = stateful.gateway.services.offload
    big = "tide " * 60_000  # 300 kB: above the 256 KiB default
    before = offload.jobs
    first = client.responses.create(model=SIMULATED, input=big)
    assert offload.jobs > before
    assert first.usage is not None and first.usage.input_tokens == 60_000
    before = offload.jobs
    second = client.responses.create(model=SIMULATED, input="and?", previous_response_id=first.id)
    assert offload.jobs > before  # a small body whose history is large is expanded in a worker
    assert second.usage is not None and second.usage.input_tokens > 60_000
    listed = client.responses.input_items.list(second.id, order="asc")
    first_item: Any = listed.data[0].to_dict()
    assert first_item["content"][0]["text"] == big


def test_expired_state_reads_as_missing_and_is_swept(stateful: Stateful, sdk: SdkClients) -> None:
    secret, key_id = stateful.key()
    client = sdk.openai(stateful.gateway.base_url, secret)
    created = client.responses.create(model=SIMULATED, input="Short-lived.")
    conversation = client.conversations.create()
    stateful.clock.advance(31 * DAY)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conversation.id)
    services = stateful.gateway.services
    assert services.state_sweeper is not None
    swept = stateful.gateway.call(services.state_sweeper.sweep())
    assert swept >= 2
    assert stateful.gateway.call(services.responses.state_bytes(stateful.account_id(key_id))) == 0


def test_with_stored_responses_off_nothing_is_kept_and_stateful_fields_are_refused(
    tmp_path: Path, sdk: SdkClients
) -> None:
    with running_gateway(tmp_path / "data", responses={"store": "off"}) as gateway:
        account = gateway.account("off")
        secret = gateway.key(account, "Nova", rpm=1000).secret
        client = sdk.openai(gateway.base_url, secret)
        created = client.responses.create(model=SIMULATED, input="Not kept.")
        assert created.to_dict()["store"] is False
        with pytest.raises(openai.NotFoundError, match="turned off"):
            client.responses.retrieve(created.id)
        for field, value in (("previous_response_id", created.id), ("conversation", "conv_1")):
            with pytest.raises(openai.BadRequestError, match=field) as caught:
                client.responses.create(model=SIMULATED, input="x", extra_body={field: value})
            assert caught.value.param == field
        with pytest.raises(openai.BadRequestError, match="item_reference"):
            client.responses.create(model=SIMULATED, input=[{"type": "item_reference", "id": "msg_1"}])
        refused = httpx.post(
            f"{gateway.base_url}/v1/conversations", headers={"authorization": f"Bearer {secret}"}, json={}
        )
        assert (
            refused.status_code == 404 and "turned off" in orjson.loads(refused.content)["error"]["message"]
        )

"""One account's stored responses, items and conversations are invisible to every other account:
reading, listing, deleting or referring to them answers exactly as a missing id does (status and
body, the id aside), and nothing of the owner's changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from tests.gateway.clients import SdkClients
from tests.state.conftest import KEEPER, SIMULATED, TRANSLATED, Stateful

Call = Callable[[openai.OpenAI, str], Any]


def _failure(call: Callable[[], Any]) -> tuple[int, dict[str, Any]]:
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    body = caught.value.response.json()
    return caught.value.status_code, body


def _same_refusal(
    mine: tuple[int, dict[str, Any]], missing: tuple[int, dict[str, Any]], ids: tuple[str, str]
) -> None:
    status, body = mine
    assert status == 404
    owned, absent = ids
    assert (status, body["error"]["message"].replace(owned, "ID")) == (
        missing[0],
        missing[1]["error"]["message"].replace(absent, "ID"),
    )
    assert {k: v for k, v in body["error"].items() if k != "message"} == {
        k: v for k, v in missing[1]["error"].items() if k != "message"
    }


@pytest.mark.parametrize("model", [SIMULATED, TRANSLATED, KEEPER])
def test_another_account_cannot_read_list_delete_or_refer_to_a_response(
    stateful: Stateful, model: str, sdk: SdkClients
) -> None:
    owner_secret, _ = stateful.key()
    other_secret, _ = stateful.key()
    owner = sdk.openai(stateful.gateway.base_url, owner_secret)
    other = sdk.openai(stateful.gateway.base_url, other_secret)
    created = owner.responses.create(model=model, input="A private note.")
    item = created.output[0].id
    assert item is not None
    absent_response, absent_item = "resp_" + "0" * 48, "msg_" + "0" * 48
    upstream_before = stateful.fake.count

    calls: list[tuple[Call, str, str]] = [
        (lambda c, i: c.responses.retrieve(i), created.id, absent_response),
        (lambda c, i: c.responses.input_items.list(i), created.id, absent_response),
        (lambda c, i: c.responses.delete(i), created.id, absent_response),
        (
            lambda c, i: c.responses.create(model=model, input="more", previous_response_id=i),
            created.id,
            absent_response,
        ),
        (
            lambda c, i: c.responses.create(model=model, input=[{"type": "item_reference", "id": i}]),
            item,
            absent_item,
        ),
    ]
    for call, owned, absent in calls:
        _same_refusal(
            _failure(lambda c=call, i=owned: c(other, i)),  # type: ignore[misc]
            _failure(lambda c=call, i=absent: c(other, i)),  # type: ignore[misc]
            (owned, absent),
        )
    assert stateful.fake.count == upstream_before  # nothing referring to it reached an upstream
    assert owner.responses.retrieve(created.id).output_text == created.output_text


def test_another_account_cannot_touch_a_conversation_or_its_items(
    stateful: Stateful, sdk: SdkClients
) -> None:
    owner_secret, _ = stateful.key()
    other_secret, _ = stateful.key()
    owner = sdk.openai(stateful.gateway.base_url, owner_secret)
    other = sdk.openai(stateful.gateway.base_url, other_secret)
    conversation = owner.conversations.create(
        items=[{"type": "message", "role": "user", "content": "secret"}]
    )
    item = owner.conversations.items.list(conversation.id).data[0].id
    assert item is not None
    absent = "conv_" + "0" * 48
    new_item = [{"type": "message", "role": "user", "content": "injected"}]

    calls: list[Call] = [
        lambda c, i: c.conversations.retrieve(i),
        lambda c, i: c.conversations.update(i, metadata={"x": "y"}),
        lambda c, i: c.conversations.delete(i),
        lambda c, i: c.conversations.items.list(i),
        lambda c, i: c.conversations.items.create(i, items=new_item),  # type: ignore[arg-type]
        lambda c, i: c.conversations.items.retrieve(item, conversation_id=i),
        lambda c, i: c.conversations.items.delete(item, conversation_id=i),
        lambda c, i: c.responses.create(model=SIMULATED, input="hi", conversation=i),
    ]
    for call in calls:
        _same_refusal(
            _failure(lambda c=call: c(other, conversation.id)),  # type: ignore[misc]
            _failure(lambda c=call: c(other, absent)),  # type: ignore[misc]
            (conversation.id, absent),
        )
    # The owner's conversation is as it was.
    items = owner.conversations.items.list(conversation.id)
    assert [i.id for i in items.data] == [item]
    assert owner.conversations.retrieve(conversation.id).metadata == {}


def test_a_second_key_of_the_same_account_shares_its_state(stateful: Stateful, sdk: SdkClients) -> None:
    gateway = stateful.gateway
    account = gateway.account("state-shared")
    first = gateway.key(account, "Nova", rpm=10_000).secret
    second = gateway.key(account, "Nova", rpm=10_000).secret
    created = sdk.openai(gateway.base_url, first).responses.create(model=SIMULATED, input="shared")
    follow = sdk.openai(gateway.base_url, second).responses.create(
        model=SIMULATED, input="continued", previous_response_id=created.id
    )
    assert follow.previous_response_id == created.id


def test_unauthenticated_and_revoked_keys_get_401(stateful: Stateful) -> None:
    base = stateful.gateway.base_url
    for path in ("/v1/responses/resp_1", "/v1/conversations/conv_1/items"):
        response = httpx.get(base + path)
        assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    assert httpx.post(base + "/v1/conversations", json={}).status_code == 401

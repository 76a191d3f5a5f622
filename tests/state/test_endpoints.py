"""The stored-state endpoints through the official openai SDK: responses read back, listed and
deleted, chains and item references served from the store, conversations end to end, streams
stored before their final event, ``store: false`` keeping nothing, and the stored echo."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from tests.gateway.clients import SdkClients
from tests.state.conftest import SIMULATED, TRANSLATED, Stateful


def ident(value: str | None) -> str:
    assert value is not None
    return value


def texts_of(messages_body: dict[str, Any]) -> list[str]:
    """Every text block of a Messages request, in order (consecutive turns of one role merge)."""
    return [p["text"] for m in messages_body["messages"] for p in m["content"] if p["type"] == "text"]


@pytest.fixture
def client(stateful: Stateful, sdk: SdkClients) -> openai.OpenAI:
    secret, _ = stateful.key()
    return sdk.openai(stateful.gateway.base_url, secret)


@pytest.mark.parametrize("model", [SIMULATED, TRANSLATED])
def test_a_response_reads_back_as_answered_and_deletes(client: openai.OpenAI, model: str) -> None:
    created = client.responses.create(model=model, input="Remember the word lantern.")
    assert created.to_dict()["store"] is True and created.status == "completed"
    got = client.responses.retrieve(created.id)
    assert got.id == created.id and got.output_text == created.output_text and got.model == model
    assert [i.id for i in got.output] == [i.id for i in created.output]
    items = client.responses.input_items.list(created.id)
    assert len(items.data) == 1 and items.data[0].type == "message"
    assert items.data[0].role == "user" and items.data[0].content[0].text == "Remember the word lantern."  # type: ignore[union-attr]

    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError, match=created.id):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(created.id)


def test_store_false_keeps_nothing(client: openai.OpenAI) -> None:
    created = client.responses.create(model=SIMULATED, input="Do not keep this.", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_a_chain_continues_and_input_items_page_as_openai_pages_them(
    stateful: Stateful, client: openai.OpenAI
) -> None:
    first = client.responses.create(model=TRANSLATED, input="My name is Ada.", instructions="Be brief.")
    second = client.responses.create(
        model=TRANSLATED, input="What is my name?", previous_response_id=first.id
    )
    assert second.previous_response_id == first.id
    # The upstream saw the whole conversation (instructions are not carried over).
    sent = stateful.sent(TRANSLATED)[-1].json()
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][0]["content"][0]["text"] == "My name is Ada."
    assert "system" not in sent

    third = client.responses.create(model=TRANSLATED, input="Thanks.", previous_response_id=second.id)
    # Everything the third response was given: 3 user turns and 2 answers, newest first.
    listed = client.responses.input_items.list(third.id)
    assert [i.role for i in listed.data] == ["user", "assistant", "user", "assistant", "user"]  # type: ignore[union-attr]
    ascending = client.responses.input_items.list(third.id, order="asc")
    assert [i.id for i in ascending.data] == [i.id for i in reversed(listed.data)]
    assert ascending.data[1].id == first.output[0].id
    # Pages of two, followed by the SDK's own paginator.
    page = client.responses.input_items.list(third.id, limit=2, order="asc")
    assert len(page.data) == 2 and page.has_more
    assert [i.id for i in page] == [i.id for i in ascending.data]  # iterating fetches every page
    with pytest.raises(openai.BadRequestError, match="limit"):
        client.responses.input_items.list(third.id, limit=101)


def test_an_item_reference_is_replaced_by_the_stored_item(stateful: Stateful, client: openai.OpenAI) -> None:
    first = client.responses.create(model=TRANSLATED, input="Say something.")
    message_id = first.output[0].id
    assert message_id is not None
    second = client.responses.create(
        model=TRANSLATED,
        input=[
            {"role": "user", "content": "Say something."},
            {"type": "item_reference", "id": message_id},
            {"role": "user", "content": "Again."},
        ],
    )
    assert second.status == "completed"
    sent = stateful.sent(TRANSLATED)[-1].json()
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][1]["content"][0]["text"] == first.output_text
    # The typeless form the SDK also allows resolves the same way.
    typeless: Any = [{"id": message_id}, {"role": "user", "content": "Go on."}]
    client.responses.create(model=TRANSLATED, input=typeless)
    replayed = stateful.sent(TRANSLATED)[-1].json()["messages"]
    assert replayed[-2]["role"] == "assistant" and replayed[-2]["content"][0]["text"] == first.output_text
    with pytest.raises(openai.NotFoundError, match="msg_nope") as caught:
        client.responses.create(model=TRANSLATED, input=[{"type": "item_reference", "id": "msg_nope"}])
    assert caught.value.param == "input[0]"


@pytest.mark.parametrize("model", [SIMULATED, TRANSLATED])
def test_a_stream_is_stored_before_its_final_event_arrives(client: openai.OpenAI, model: str) -> None:
    with client.responses.stream(model=model, input="Stream this.") as stream:
        for event in stream:
            if event.type == "response.completed":
                # The client has the id only now; the stored copy must already be there.
                stored = client.responses.retrieve(event.response.id)
                assert stored.output_text == event.response.output_text
        final = stream.get_final_response()
    follow = client.responses.create(model=model, input="And then?", previous_response_id=final.id)
    assert follow.previous_response_id == final.id
    assert len(client.responses.input_items.list(follow.id).data) == 3


def test_conversations_through_the_sdk(stateful: Stateful, client: openai.OpenAI) -> None:
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "I like tea."}], metadata={"topic": "drinks"}
    )
    assert conversation.id.startswith("conv_") and conversation.metadata == {"topic": "drinks"}
    assert client.conversations.retrieve(conversation.id).id == conversation.id
    updated = client.conversations.update(conversation.id, metadata={"topic": "tea"})
    assert updated.metadata == {"topic": "tea"}

    answer = client.responses.create(model=TRANSLATED, input="What do I like?", conversation=conversation.id)
    sent = stateful.sent(TRANSLATED)[-1].json()
    assert texts_of(sent) == ["I like tea.", "What do I like?"]
    items = client.conversations.items.list(conversation.id, order="asc")
    assert [i.type for i in items.data] == ["message", "message", "message"]
    assert items.data[2].id == answer.output[0].id

    added = client.conversations.items.create(
        conversation.id, items=[{"type": "message", "role": "user", "content": "Also coffee."}]
    )
    assert len(added.data) == 1 and added.first_id == added.last_id == added.data[0].id
    fetched = client.conversations.items.retrieve(ident(added.data[0].id), conversation_id=conversation.id)
    assert fetched.id == added.data[0].id
    after = client.conversations.items.delete(ident(items.data[0].id), conversation_id=conversation.id)
    assert after.id == conversation.id
    remaining = [i.id for i in client.conversations.items.list(conversation.id, order="asc")]
    assert remaining == [items.data[1].id, items.data[2].id, added.data[0].id]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(ident(items.data[0].id), conversation_id=conversation.id)

    # The next turn sees the conversation as it is now.
    client.responses.create(model=TRANSLATED, input="Summarise.", conversation={"id": conversation.id})
    texts = texts_of(stateful.sent(TRANSLATED)[-1].json())
    assert texts[0] == "What do I like?" and texts[-2:] == ["Also coffee.", "Summarise."]

    deleted = client.conversations.delete(conversation.id)
    assert deleted.deleted and deleted.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError, match=conversation.id) as caught:
        client.responses.create(model=TRANSLATED, input="Hello?", conversation=conversation.id)
    assert caught.value.param == "conversation"


def test_previous_response_id_and_conversation_together_are_refused(client: openai.OpenAI) -> None:
    conversation = client.conversations.create()
    first = client.responses.create(model=SIMULATED, input="one")
    with pytest.raises(openai.BadRequestError, match="cannot be used together"):
        client.responses.create(
            model=SIMULATED, input="two", previous_response_id=first.id, conversation=conversation.id
        )


def test_stateful_fields_that_cannot_be_honoured_are_refused_by_name(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="prompt") as prompt:
        client.responses.create(model=TRANSLATED, input="x", prompt={"id": "pmpt_1"})
    assert prompt.value.param == "prompt"
    with pytest.raises(openai.BadRequestError, match="prompt"):
        client.responses.create(model=SIMULATED, input="x", prompt={"id": "pmpt_1"})
    with pytest.raises(openai.BadRequestError, match="background") as background:
        client.responses.create(model=SIMULATED, input="x", background=True)
    assert background.value.param == "background"


def test_reads_are_free_and_basic_keys_are_refused(stateful: Stateful, sdk: SdkClients) -> None:
    secret, key_id = stateful.key()
    client = sdk.openai(stateful.gateway.base_url, secret)
    created = client.responses.create(model=SIMULATED, input="Bill me once.")
    client.responses.retrieve(created.id)
    client.responses.input_items.list(created.id)
    client.conversations.create()
    assert len(stateful.usage(key_id)) == 1  # only the model request made a usage record
    basic, _ = stateful.key("Basic")
    with pytest.raises(openai.PermissionDeniedError, match="/v1/messages"):
        sdk.openai(stateful.gateway.base_url, basic).responses.retrieve(created.id)


def test_unknown_paths_and_methods_answer_in_json(stateful: Stateful) -> None:
    secret, _ = stateful.key()
    headers = {"authorization": f"Bearer {secret}"}
    base = stateful.gateway.base_url
    wrong = httpx.put(f"{base}/v1/responses/resp_1", headers=headers)
    assert wrong.status_code == 405 and wrong.headers["allow"] == "DELETE, GET, HEAD, POST"
    assert httpx.patch(f"{base}/v1/conversations/conv_1", headers=headers).status_code == 405
    nested = httpx.get(f"{base}/v1/responses/resp_1/input_items/extra", headers=headers)
    assert nested.status_code == 404 and nested.json()["error"]["type"] == "invalid_request_error"
    assert httpx.post(f"{base}/v1/responses/resp_1/input_items", headers=headers).status_code == 405
    cancel = httpx.post(f"{base}/v1/responses/resp_unknown/cancel", headers=headers)
    assert cancel.status_code == 404

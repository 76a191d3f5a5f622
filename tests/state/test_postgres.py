"""Stored state on PostgreSQL, shared by two gateway instances: a response kept by one instance
is continued, listed and deleted through the other, a conversation grows from both, and another
account sees none of it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import openai
import pytest
from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer, running_gateway
from tests.state.conftest import SIMULATED
from tests.storage.engines import create_database, database_url, drop_database


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[GatewayServer, GatewayServer]]:
    database_url()  # fail (CI) or skip (locally) with a clear message when PostgreSQL is absent
    url = asyncio.run(create_database("mgstate"))
    try:
        with ExitStack() as stack:
            first, second = (
                stack.enter_context(running_gateway(tmp_path / f"i{n}", database_url=url)) for n in range(2)
            )
            yield first, second
    finally:
        asyncio.run(drop_database(url))


def test_two_instances_share_stored_responses_and_conversations(
    pair: tuple[GatewayServer, GatewayServer], sdk: SdkClients
) -> None:
    first, second = pair
    account = first.account("pg-state")
    secret = first.key(account, "Nova", rpm=1000).secret
    second.refresh_keys()
    one, two = sdk.openai(first.base_url, secret), sdk.openai(second.base_url, secret)

    with one.responses.stream(model=SIMULATED, input="Kept by the first instance.") as stream:
        kept = stream.get_final_response()
    continued = two.responses.create(model=SIMULATED, input="Continued.", previous_response_id=kept.id)
    assert [i.role for i in one.responses.input_items.list(continued.id, order="asc").data] == [  # type: ignore[union-attr]
        "user",
        "assistant",
        "user",
    ]

    conversation = one.conversations.create(items=[{"type": "message", "role": "user", "content": "hi"}])
    two.responses.create(model=SIMULATED, input="From the second.", conversation=conversation.id)
    assert len(one.conversations.items.list(conversation.id).data) == 3

    other_account = second.account("pg-other")
    other = sdk.openai(second.base_url, second.key(other_account, "Nova", rpm=1000).secret)
    first.refresh_keys()
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(kept.id)
    with pytest.raises(openai.NotFoundError):
        other.conversations.items.list(conversation.id)

    two.responses.delete(kept.id)
    with pytest.raises(openai.NotFoundError):
        one.responses.retrieve(kept.id)

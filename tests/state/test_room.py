"""Room for a stored answer, checked before anything is spent (``limits.stored_room``): a request
asking to be stored is refused at the account's limit, or when its own input is too large; the
account's count may be ``responses.room_check_max_age_seconds`` old when it lets a request through,
never when it refuses one; and the limit is never passed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest
from tests.gateway.clients import SdkClients
from tests.gateway_server import GatewayServer, running_gateway
from tests.observability.scrape import scrape
from tests.state.conftest import SIMULATED

from modelgate.storage.responses import NewResponse, StoredItem, object_bytes

LIMIT = 4096


@pytest.fixture(
    scope="module",
    params=[(0.0, "auto"), (60.0, "auto"), (60.0, "off")],
    ids=["read-every-time", "remembered", "remembered-kept-before-answer"],
)
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    max_age, keep_after_answer = request.param
    responses = {
        "max_account_bytes": LIMIT,
        "max_object_bytes": 2048,
        "room_check_max_age_seconds": max_age,
        "keep_after_answer": keep_after_answer,
    }
    with running_gateway(tmp_path_factory.mktemp("room") / "data", responses=responses) as server:
        yield server


def new_account(gateway: GatewayServer, sdk: SdkClients) -> tuple[int, openai.OpenAI]:
    """A fresh account and an SDK client with a key of it."""
    account = gateway.account(f"room-{time.monotonic_ns()}")
    secret = gateway.key(account, "Nova", rpm=10_000).secret
    return account.id, sdk.openai(gateway.base_url, secret)


def used(gateway: GatewayServer, account_id: int) -> int:
    return gateway.call(gateway.services.responses.state_bytes(account_id))


def balance(gateway: GatewayServer, account_id: int) -> int:
    account = gateway.call(gateway.services.accounts.get_account(account_id))
    assert account is not None
    return account.balance_uc


def fill_elsewhere(gateway: GatewayServer, account_id: int, size: int) -> str:
    """Store ``size`` bytes for the account as another instance would: in the database, past this
    gateway's own count."""
    ident = f"resp_elsewhere_{time.monotonic_ns()}"
    items = [StoredItem("msg_1", b"{}", "output")]
    body = b"x" * (size - object_bytes(b"", items))
    now = time.time()
    response = NewResponse(ident, account_id, "k", body, [], items, None, None, "", now, now + 3600)
    assert gateway.call(gateway.services.responses.save_response(response, LIMIT))
    return ident


def refused_for_room(client: openai.OpenAI) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=SIMULATED, input="Keep this.")
    return caught.value


def test_a_full_account_is_refused_before_anything_is_spent_and_store_false_still_answers(
    gateway: GatewayServer, sdk: SdkClients
) -> None:
    account_id, client = new_account(gateway, sdk)
    fill_elsewhere(gateway, account_id, LIMIT)
    spent = balance(gateway, account_id)
    error = refused_for_room(client)
    assert error.status_code == 400
    assert error.code == "stored_state_limit_reached" and error.param == "store"
    assert balance(gateway, account_id) == spent
    answered = client.responses.create(model=SIMULATED, input="Not kept.", store=False)
    assert answered.output_text and balance(gateway, account_id) < spent
    assert used(gateway, account_id) == LIMIT


def test_a_refusal_reads_the_count_again_so_room_made_elsewhere_counts_at_once(
    gateway: GatewayServer, sdk: SdkClients
) -> None:
    account_id, client = new_account(gateway, sdk)
    other = fill_elsewhere(gateway, account_id, LIMIT)
    assert refused_for_room(client).code == "stored_state_limit_reached"  # now remembered as full
    assert gateway.call(gateway.services.responses.delete_response(account_id, other))
    kept = client.responses.create(model=SIMULATED, input="Room again.")
    assert client.responses.retrieve(kept.id).id == kept.id


def test_a_count_that_leaves_room_may_be_as_old_as_configured_and_the_limit_holds(
    gateway: GatewayServer, sdk: SdkClients
) -> None:
    account_id, client = new_account(gateway, sdk)
    first = client.responses.with_raw_response.create(model=SIMULATED, input="Kept.")
    assert "x-modelgate-stored" not in first.headers  # kept; the account's count is now known
    # ... read before the answer and since grown by what was kept, without another read
    assert gateway.call(gateway.services.stored_room.used(account_id)) == used(gateway, account_id) > 0
    fill_elsewhere(gateway, account_id, LIMIT - used(gateway, account_id))
    spent = balance(gateway, account_id)
    if gateway.settings.responses.room_check_max_age_seconds == 0:
        assert refused_for_room(client).code == "stored_state_limit_reached"
        assert balance(gateway, account_id) == spent
    else:  # let through on the remembered count: answered, not kept, and paid for
        refused = gateway.services.responses.refused
        late = client.responses.with_raw_response.create(model=SIMULATED, input="Not kept.")
        assert late.parse().output_text
        written_first = gateway.settings.responses.keep_after_answer == "off"
        if written_first:  # the header tells
            assert late.headers["x-modelgate-stored"] == "false"
        else:
            # The remembered count said "room", so the answer was sent while its write was still
            # in flight (storage.deferred_responses): refused after it, so no header says so.
            assert "x-modelgate-stored" not in late.headers
        assert balance(gateway, account_id) < spent
        with pytest.raises(openai.NotFoundError):  # a read waits for any write in flight
            client.responses.retrieve(late.parse().id)
        assert gateway.services.responses.refused == refused + (0 if written_first else 1)
    assert used(gateway, account_id) == LIMIT


def test_an_input_larger_than_a_stored_object_may_be_is_refused(
    gateway: GatewayServer, sdk: SdkClients
) -> None:
    account_id, client = new_account(gateway, sdk)
    spent = balance(gateway, account_id)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=SIMULATED, input="y" * 4000)
    assert caught.value.code == "stored_object_too_large" and caught.value.param == "store"
    assert balance(gateway, account_id) == spent and used(gateway, account_id) == 0


def test_what_the_conversations_api_stores_counts_at_once(gateway: GatewayServer, sdk: SdkClients) -> None:
    """A conversation created or added to through /v1/conversations adds to this instance's count
    as a kept answer does: the remembered count equals the database's without another read."""
    account_id, client = new_account(gateway, sdk)
    client.responses.create(model=SIMULATED, input="Kept.")  # the account's count is now known
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "a first question"}],
        metadata={"topic": "room"},
    )
    assert gateway.call(gateway.services.stored_room.used(account_id)) == used(gateway, account_id)
    client.conversations.items.create(
        conversation.id,
        items=[{"type": "message", "role": "user", "content": "and a second one"}],
    )
    assert gateway.call(gateway.services.stored_room.used(account_id)) == used(gateway, account_id)


def test_metadata_updates_count_toward_the_limit_and_are_refused_past_it(
    gateway: GatewayServer, sdk: SdkClients
) -> None:
    """Replacing a conversation's metadata with a larger one stores the difference: past the
    account's limit the update is refused in the Responses error shape and nothing changes."""
    account_id, client = new_account(gateway, sdk)
    metadata = {f"k{n:02d}": "v" * 90 for n in range(16)}  # ~1.6 KB, under max_object_bytes
    updated: list[str] = []
    last = ""
    with pytest.raises(openai.BadRequestError) as caught:
        for _ in range(8):
            last = client.conversations.create().id
            client.conversations.update(last, metadata=metadata)
            updated.append(last)
    assert caught.value.code == "stored_state_limit_reached"
    assert 1 <= len(updated) < 8 and last not in updated
    assert used(gateway, account_id) <= LIMIT
    # The refused update left its conversation as it was; the others keep theirs.
    assert not client.conversations.retrieve(last).metadata
    assert client.conversations.retrieve(updated[0]).metadata == metadata


def test_the_remembered_accounts_are_counted_in_the_metrics(gateway: GatewayServer, sdk: SdkClients) -> None:
    _, client = new_account(gateway, sdk)
    client.responses.create(model=SIMULATED, input="Kept.")
    remembered = scrape(gateway.base_url).value("modelgate_stored_room_accounts")
    assert remembered == gateway.services.stored_room.remembered
    if gateway.settings.responses.room_check_max_age_seconds == 0:
        assert remembered == 0  # read every time: nothing is remembered
    else:
        assert remembered >= 1  # this account's count, at least

"""A key's tokens per minute and requests in flight through the admin API: set at creation,
shown by GET, changed by PATCH; an operator sets, raises and removes them, a key's owner may only
lower them (403 otherwise); hostile values are 400 with the field named; a change applies to the
running server."""

from __future__ import annotations

import pytest

from tests.admin.conftest import Admin


def test_created_shown_and_lowered_by_the_owner(admin: Admin) -> None:
    tenant = admin.tenant("Pro")
    owner = tenant.admin
    created = owner.ok("POST", "/keys", {"group": "Pro", "tpm": 5000, "max_concurrency": 4}, status=201)
    assert created["tpm"] == 5000 and created["max_concurrency"] == 4
    key_id = created["id"]
    assert owner.ok("GET", f"/keys/{key_id}")["tpm"] == 5000
    lowered = owner.ok("PATCH", f"/keys/{key_id}", {"tpm": 4000, "max_concurrency": 4})
    assert lowered["tpm"] == 4000 and lowered["max_concurrency"] == 4
    stored = admin.stored_key(key_id)
    assert stored is not None and (stored.tpm, stored.max_concurrency) == (4000, 4)
    for body in ({"tpm": 4001}, {"tpm": None}, {"max_concurrency": 5}, {"max_concurrency": None}):
        refused = owner.request("PATCH", f"/keys/{key_id}", body)
        assert refused.status_code == 403, (body, refused.text)
        assert refused.json()["error"]["type"] == "permission_error"
    # A limit the operator did not set is not the owner's to set either.
    no_limit = tenant.key.record.id
    assert owner.request("PATCH", f"/keys/{no_limit}", {"tpm": 10}).status_code == 403
    stored = admin.stored_key(key_id)
    assert stored is not None and (stored.tpm, stored.max_concurrency) == (4000, 4)


def test_the_operator_raises_and_removes(admin: Admin) -> None:
    tenant = admin.tenant("Pro")
    key_id = tenant.key.record.id
    op = admin.operator
    assert op.ok("GET", f"/keys/{key_id}")["tpm"] is None
    assert op.ok("PATCH", f"/keys/{key_id}", {"tpm": 100, "max_concurrency": 1})["tpm"] == 100
    raised = op.ok("PATCH", f"/keys/{key_id}", {"tpm": 9000})
    assert raised["tpm"] == 9000 and raised["max_concurrency"] == 1
    removed = op.ok("PATCH", f"/keys/{key_id}", {"tpm": None, "max_concurrency": None})
    assert removed["tpm"] is None and removed["max_concurrency"] is None


def test_a_limit_set_applies_to_the_running_server(admin: Admin) -> None:
    tenant = admin.tenant("Pro")
    key_id = tenant.key.record.id
    admin.operator.ok("PATCH", f"/keys/{key_id}", {"tpm": 1})
    refused = admin.chat(tenant.key.secret)
    assert refused.status_code == 429 and refused.headers["x-modelgate-limit"] == "tpm"
    admin.operator.ok("PATCH", f"/keys/{key_id}", {"tpm": None})
    assert admin.chat(tenant.key.secret).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"tpm": 0},
        {"tpm": -1},
        {"tpm": 2**31},
        {"tpm": "abc"},
        {"tpm": "5h=abc"},
        {"tpm": 1.5},
        {"tpm": True},
        {"max_concurrency": 0},
        {"max_concurrency": 10**30},
        {"max_concurrency": [2]},
    ],
)
def test_hostile_limits_are_400_naming_the_field(admin: Admin, body: dict[str, object]) -> None:
    tenant = admin.tenant("Pro")
    field = next(iter(body))
    for method, path, payload in (
        ("POST", "/keys", {"account_id": tenant.account.id, "group": "Pro", **body}),
        ("PATCH", f"/keys/{tenant.key.record.id}", body),
    ):
        response = admin.operator.request(method, path, payload)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["message"].startswith(field), response.text
    stored = admin.stored_key(tenant.key.record.id)
    assert stored is not None and stored.tpm is None and stored.max_concurrency is None

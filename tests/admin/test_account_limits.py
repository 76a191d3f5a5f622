"""An account's rate limits through the admin API: ``PATCH /admin/api/accounts/{id}`` (operators
only: an account's owner gets 403), shown by GET, ``null`` removes one, absent fields stay,
hostile values are 400 naming the field, the change applies to the running server at once; and a
key's owner may set the key's tokens per minute or requests in flight within the account's."""

from __future__ import annotations

import pytest

from tests.admin.conftest import Admin


def test_the_operator_sets_shows_and_clears_an_accounts_limits(admin: Admin) -> None:
    tenant = admin.tenant("Pro")
    path = f"/accounts/{tenant.account.id}"
    op = admin.operator
    before = op.ok("GET", path)
    assert (before["rpm"], before["tpm"], before["max_concurrency"]) == (None, None, None)
    changed = op.ok("PATCH", path, {"rpm": 2, "tpm": 50_000, "max_concurrency": 3})
    assert (changed["rpm"], changed["tpm"], changed["max_concurrency"]) == (2, 50_000, 3)
    assert op.ok("GET", path)["tpm"] == 50_000
    # Applied to the running server at once: two requests of the account's key, then its rpm.
    statuses = [admin.chat(tenant.key.secret).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    kept = op.ok("PATCH", path, {"rpm": None})  # absent fields stay, null removes
    assert (kept["rpm"], kept["tpm"], kept["max_concurrency"]) == (None, 50_000, 3)
    assert admin.chat(tenant.key.secret).status_code == 200
    stored = admin.stored_account(tenant.account.id)
    assert stored is not None and (stored.rpm, stored.tpm, stored.max_concurrency) == (None, 50_000, 3)


def test_an_owner_cannot_change_the_accounts_limits(admin: Admin) -> None:
    tenant = admin.tenant("Pro")
    refused = tenant.admin.request("PATCH", f"/accounts/{tenant.account.id}", {"max_concurrency": 100})
    assert refused.status_code == 403, refused.text
    stored = admin.stored_account(tenant.account.id)
    assert stored is not None and stored.max_concurrency is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tpm": 0}, "tpm"),
        ({"rpm": -1}, "rpm"),
        ({"max_concurrency": "4"}, "max_concurrency"),
        ({"tpm": 2**31}, "tpm"),
    ],
)
def test_hostile_values_are_400(admin: Admin, body: dict[str, object], field: str) -> None:
    tenant = admin.tenant("Pro")
    refused = admin.operator.request("PATCH", f"/accounts/{tenant.account.id}", body)
    assert refused.status_code == 400 and field in refused.text


def test_an_owner_sets_a_keys_limit_within_the_accounts(admin: Admin) -> None:
    tenant = admin.tenant("Pro")
    admin.operator.ok("PATCH", f"/accounts/{tenant.account.id}", {"tpm": 8000, "max_concurrency": 4})
    key_id = tenant.key.record.id
    lowered = tenant.admin.ok("PATCH", f"/keys/{key_id}", {"tpm": 5000, "max_concurrency": 4})
    assert (lowered["tpm"], lowered["max_concurrency"]) == (5000, 4)
    other = admin.gateway.key(tenant.account, "Pro", name="second").record.id
    for body in ({"tpm": 8001}, {"max_concurrency": 5}, {"tpm": None}):
        assert tenant.admin.request("PATCH", f"/keys/{other}", body).status_code == 403, body


def test_every_hostile_account_limit_body_of_the_fuzz_suite_is_a_json_4xx(admin: Admin) -> None:
    """Each hostile account-limit body of the fuzz suite (the fuzz run draws a sample), every one
    sent: a JSON 4xx, nothing changed."""
    from tests.fuzz.hostile import ADMIN_BODIES

    tenant = admin.tenant()
    before = admin.stored_account(tenant.account.id)
    limit_fields = {"rpm", "tpm", "max_concurrency"}
    bodies = [
        (m, p.replace("/accounts/1", f"/accounts/{tenant.account.id}"), b)
        for m, p, b in ADMIN_BODIES
        if "/accounts/" in p and isinstance(b, dict) and limit_fields & set(b)
    ]
    assert len(bodies) >= 9
    auth = {"authorization": f"Bearer {admin.operator.token}"}
    for method, path, body in bodies:
        response = admin.client.request(method, path, json=body, headers=auth)
        assert 400 <= response.status_code < 500, (path, body, response.text)
        assert response.json()["error"]["type"], (path, body)
    assert admin.stored_account(tenant.account.id) == before

"""Spend caps by window through the admin API: ``caps`` / ``caps_uc`` on keys (POST, GET, PATCH)
and accounts (``PATCH /admin/api/accounts/{id}``, shown by GET); an operator sets, raises and
removes them, a key's owner may only set or lower a key's, never an account's; another account's
ids answer like missing ones; hostile values are 400 with the field named and change nothing; a
cap set applies to the running server."""

from __future__ import annotations

import pytest

from tests.admin.conftest import Admin

NO_CAPS = {"5h": None, "day": None, "week": None, "month": None}


def test_key_caps_created_shown_and_lowered_by_the_owner(admin: Admin) -> None:
    tenant = admin.tenant("Pro")
    owner = tenant.admin
    created = owner.ok(
        "POST", "/keys", {"group": "Pro", "caps": {"5h": "2", "day": "5.5"}, "monthly_cap": "9"}, status=201
    )
    assert created["caps"] == {"5h": "2", "day": "5.5", "week": None, "month": "9"}
    assert created["caps_uc"] == {"5h": 2_000_000, "day": 5_500_000, "week": None, "month": 9_000_000}
    key_id = created["id"]
    assert owner.ok("GET", f"/keys/{key_id}")["caps_uc"]["day"] == 5_500_000
    lowered = owner.ok("PATCH", f"/keys/{key_id}", {"caps_uc": {"5h": 1_000_000}, "caps": {"week": "3"}})
    assert lowered["caps_uc"] == {"5h": 1_000_000, "day": 5_500_000, "week": 3_000_000, "month": 9_000_000}
    for body in ({"caps": {"day": "6"}}, {"caps": {"5h": None}}, {"caps_uc": {"week": 3_000_001}}):
        refused = owner.request("PATCH", f"/keys/{key_id}", body)
        assert refused.status_code == 403, (body, refused.text)
        assert refused.json()["error"]["type"] == "permission_error"
    stored = admin.stored_key(key_id)
    assert stored is not None and stored.window_caps == (1_000_000, 5_500_000, 3_000_000, 9_000_000)


def test_the_operator_raises_and_removes_key_caps(admin: Admin) -> None:
    tenant = admin.tenant("Pro")
    key_id = tenant.key.record.id
    op = admin.operator
    assert op.ok("GET", f"/keys/{key_id}")["caps"] == NO_CAPS
    op.ok("PATCH", f"/keys/{key_id}", {"caps": {"day": "1"}})
    raised = op.ok("PATCH", f"/keys/{key_id}", {"caps": {"day": "10", "5h": "4"}})
    assert raised["caps"] == {**NO_CAPS, "day": "10", "5h": "4"}
    removed = op.ok("PATCH", f"/keys/{key_id}", {"caps": {"day": None, "5h": None}})
    assert removed["caps"] == NO_CAPS


def test_account_caps_are_the_operators_to_set(admin: Admin) -> None:
    tenant = admin.tenant("Pro")
    path = f"/accounts/{tenant.account.id}"
    assert admin.operator.ok("GET", path)["caps"] == NO_CAPS
    changed = admin.operator.ok(
        "PATCH", path, {"caps": {"week": "20", "month": "50"}, "caps_uc": {"5h": 3_000_000}}
    )
    assert changed["caps_uc"] == {"5h": 3_000_000, "day": None, "week": 20_000_000, "month": 50_000_000}
    assert tenant.admin.ok("GET", path)["caps"]["week"] == "20"  # the owner sees them
    refused = tenant.admin.request("PATCH", path, {"caps": {"week": "10"}})
    assert refused.status_code == 403, refused.text  # lowering too: only an operator
    cleared = admin.operator.ok("PATCH", path, {"caps": {"week": None}})
    assert cleared["caps_uc"]["week"] is None and cleared["caps_uc"]["month"] == 50_000_000
    stored = admin.stored_account(tenant.account.id)
    assert stored is not None and stored.window_caps == (3_000_000, None, None, 50_000_000)


def test_another_accounts_ids_answer_like_missing_ones(admin: Admin) -> None:
    mine, theirs = admin.tenant("Pro"), admin.tenant("Pro")
    for path, body in (
        (f"/accounts/{theirs.account.id}", {"caps": {"day": "1"}}),
        (f"/keys/{theirs.key.record.id}", {"caps": {"day": "1"}}),
    ):
        other = mine.admin.request("PATCH", path, body)
        missing = mine.admin.request("PATCH", path.rsplit("/", 1)[0] + "/999999999", body)
        assert other.status_code == missing.status_code == 404, (other.text, missing.text)
        assert other.json()["error"]["type"] == missing.json()["error"]["type"]
    assert admin.stored_key(theirs.key.record.id).window_caps == (None, None, None, None)  # type: ignore[union-attr]
    assert admin.stored_account(theirs.account.id).window_caps == (None, None, None, None)  # type: ignore[union-attr]


def test_a_cap_set_applies_to_the_running_server(admin: Admin) -> None:
    tenant = admin.tenant("Basic")
    admin.operator.ok("PATCH", f"/accounts/{tenant.account.id}", {"caps_uc": {"day": 1}})
    refused = admin.chat(tenant.key.secret)
    assert refused.status_code == 402 and refused.headers["x-modelgate-limit"] == "cap-day"
    assert refused.json()["error"]["code"] == "cap_day_reached"
    admin.operator.ok("PATCH", f"/accounts/{tenant.account.id}", {"caps": {"day": None}})
    assert admin.chat(tenant.key.secret).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"caps": {"day": "-1"}},
        {"caps": {"day": "abc"}},
        {"caps": {"day": 5}},
        {"caps": {"year": "5"}},
        {"caps": {"5h": "1e3"}},
        {"caps": {"week": "99999999999999999999"}},
        {"caps_uc": {"day": -1}},
        {"caps_uc": {"day": 2**53}},
        {"caps_uc": {"day": "5"}},
        {"caps_uc": {"day": 1.5}},
        {"caps": ["day", "5"]},
        {"caps": {"day": "1"}, "caps_uc": {"day": 1}},
        {"caps": {"month": "1"}},
    ],
)
def test_hostile_key_caps_are_400_naming_the_field(admin: Admin, body: dict[str, object]) -> None:
    tenant = admin.tenant("Pro")
    for method, path, payload in (
        ("POST", "/keys", {"account_id": tenant.account.id, "group": "Pro", **body}),
        ("PATCH", f"/keys/{tenant.key.record.id}", body),
    ):
        response = admin.operator.request(method, path, payload)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["message"].startswith("caps"), response.text
    stored = admin.stored_key(tenant.key.record.id)
    assert stored is not None and stored.window_caps == (None, None, None, None)


def test_every_hostile_caps_body_of_the_fuzz_suite_is_a_4xx_that_changes_nothing(admin: Admin) -> None:
    from tests.fuzz.hostile import ADMIN_BODIES

    tenant = admin.tenant("Pro")
    before = admin.stored_account(tenant.account.id)
    bodies = [b for b in ADMIN_BODIES if isinstance(b[2], dict) and {"caps", "caps_uc"} & set(b[2])]
    assert len(bodies) >= 10
    for method, path, body in bodies:
        path = path.replace("/accounts/1", f"/accounts/{tenant.account.id}").removeprefix("/admin/api")
        if isinstance(body, dict) and body.get("account_id") == 1:
            body = {**body, "account_id": tenant.account.id}
        response = admin.operator.request(method, path, body)
        assert 400 <= response.status_code < 500, (method, path, body, response.text)
    assert admin.stored_account(tenant.account.id) == before
    assert len(admin.gateway.call(admin.gateway.services.key_records.list_keys(tenant.account.id))) == 1

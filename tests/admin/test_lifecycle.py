"""Key changes made through the admin API apply to the running gateway at once."""

from __future__ import annotations

from tests.admin.conftest import Admin


def test_revocation_via_the_api_is_refused_on_the_next_request(admin: Admin) -> None:
    tenant = admin.tenant()
    sibling = admin.gateway.key(tenant.account, "Basic", name="sibling")
    key_id = tenant.key.record.id
    assert admin.chat(tenant.key.secret).status_code == 200

    revoked = tenant.admin.ok("POST", f"/keys/{key_id}/revoke")
    assert revoked["state"] == "disabled" and revoked["revoked_at"] is not None

    refused = admin.chat(tenant.key.secret)  # no wait: the server applied the change itself
    assert refused.status_code == 401
    assert "revoked" in refused.json()["error"]["message"]
    assert admin.chat(sibling.secret).status_code == 200  # other keys untouched
    # Idempotent, and a revoked key can be neither rotated nor brought back.
    assert tenant.admin.ok("POST", f"/keys/{key_id}/revoke") == revoked
    rotate = tenant.admin.request("POST", f"/keys/{key_id}/rotate", {"grace_seconds": 0})
    assert rotate.status_code == 409 and rotate.json()["error"]["type"] == "conflict_error"
    assert admin.chat(tenant.key.secret).status_code == 401


def test_rotation_with_grace_keeps_the_old_secret_working_until_it_expires(admin: Admin) -> None:
    tenant = admin.tenant()
    key_id, old = tenant.key.record.id, tenant.key.secret
    assert admin.chat(old).status_code == 200
    spent_before = tenant.admin.ok("GET", f"/keys/{key_id}")["spent_this_month_uc"]

    rotated = tenant.admin.ok("POST", f"/keys/{key_id}/rotate", {"grace_seconds": 3600})
    new = rotated["secret"]
    assert new != old and new.startswith("sk-cs4-") and rotated["id"] == key_id
    assert rotated["display"].endswith(new[-4:]) and rotated["previous_secret_valid_until"] is not None
    assert rotated["spent_this_month_uc"] == spent_before  # spend carries over to the same record
    assert "secret" not in tenant.admin.ok("GET", f"/keys/{key_id}")

    assert admin.chat(new).status_code == 200
    assert admin.chat(old).status_code == 200  # within the grace period
    usage = tenant.admin.ok("GET", f"/usage?key_id={key_id}")
    assert usage["summary"]["requests"] == 3  # both secrets bill the same key


def test_a_revoked_keys_old_secret_is_not_shown_as_working(admin: Admin) -> None:
    tenant = admin.tenant()
    key_id, old = tenant.key.record.id, tenant.key.secret
    rotated = tenant.admin.ok("POST", f"/keys/{key_id}/rotate", {"grace_seconds": 3600})
    assert tenant.admin.ok("GET", f"/keys/{key_id}")["previous_secret_active"] is True
    tenant.admin.ok("POST", f"/keys/{key_id}/revoke")
    shown = tenant.admin.ok("GET", f"/keys/{key_id}")
    assert shown["state"] == "disabled" and shown["previous_secret_active"] is False
    assert admin.chat(old).status_code == 401 and admin.chat(rotated["secret"]).status_code == 401


def test_rotation_without_grace_stops_the_old_secret_at_once(admin: Admin) -> None:
    tenant = admin.tenant()
    key_id, old = tenant.key.record.id, tenant.key.secret
    rotated = admin.operator.ok("POST", f"/keys/{key_id}/rotate", {"grace_seconds": 0})
    assert rotated["previous_secret_valid_until"] is None
    assert admin.chat(old).status_code == 401
    assert admin.chat(rotated["secret"]).status_code == 200
    # A second rotation with the default grace (from configuration) also takes effect at once.
    again = admin.operator.ok("POST", f"/keys/{key_id}/rotate")
    assert admin.chat(again["secret"]).status_code == 200
    assert admin.chat(rotated["secret"]).status_code == 200  # default grace: 24 h
    assert admin.operator.request("POST", f"/keys/{key_id}/rotate", {"grace_seconds": -1}).status_code == 400


def test_keys_created_via_the_api_work_at_once_and_caps_apply(admin: Admin) -> None:
    tenant = admin.tenant()
    created = tenant.admin.ok("POST", "/keys", {"group": "Basic", "monthly_cap_uc": 1}, status=201)
    refused = admin.chat(created["secret"])
    assert refused.status_code == 402  # a 1 µc cap cannot cover any request
    tenant.admin.ok("PATCH", f"/keys/{created['id']}", {"monthly_cap": None})
    assert admin.chat(created["secret"]).status_code == 200

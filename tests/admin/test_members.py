"""Members of an account, end to end through single sign-on against the real provider: an operator
invites the first owner, the owner invites a member, each signs in with their one-time link; a
member manages only their own keys, an owner all of the account's keys and its members; another
account's member and invitation ids answer exactly like missing ones."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest

from modelgate.storage.base import Account
from tests.admin.sso_fixtures import SsoSetup, person, sso_gateway
from tests.gateway_server import ManualClock

TTL = 3600.0


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock(time.time())


@pytest.fixture(scope="module")
def sso(tmp_path_factory: pytest.TempPathFactory, clock: ManualClock) -> Iterator[SsoSetup]:
    with sso_gateway(
        tmp_path_factory.mktemp("members") / "data", clock=clock, invite_ttl_seconds=TTL
    ) as setup:
        yield setup


@pytest.fixture(scope="module")
def operator(sso: SsoSetup) -> Iterator[httpx.Client]:
    token = sso.gateway.call(sso.gateway.management.create_admin_token(None))
    with httpx.Client(
        base_url=sso.gateway.base_url + "/admin/api", headers={"authorization": f"Bearer {token}"}, timeout=10
    ) as client:
        yield client


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def invite(operator: httpx.Client, account: Account, role: str = "owner") -> dict[str, Any]:
    made: dict[str, Any] = ok(
        operator.post("/invites", json={"account_id": account.id, "role": role, "email": "x@example.com"}),
        201,
    )
    return made


@contextmanager
def joined(sso: SsoSetup, link: str, name: str) -> Iterator[httpx.Client]:
    """A person who opens the invitation link and signs in: their browser, signed in."""
    user = sso.provider.add_user(person(name))
    with sso.browser() as browser:
        answer = sso.sign_in(browser, user.sub, path=link)
        assert answer.status_code == 303, answer.text
        yield browser


def test_owners_invite_members_who_manage_only_their_own_keys(sso: SsoSetup, operator: httpx.Client) -> None:
    account = sso.gateway.account("shared-team")
    issued = invite(operator, account)
    assert issued["token"].startswith("mg-inv-") and issued["link"].endswith(issued["token"])
    assert issued["state"] == "open" and issued["role"] == "owner"
    # The list never shows the token again.
    listed = ok(operator.get("/invites", params={"account_id": account.id}))["data"]
    assert [i["id"] for i in listed] == [issued["id"]] and "token" not in listed[0]

    with joined(sso, issued["link"], "Olivia") as olivia:
        me = ok(olivia.get("/admin/api/me"))
        assert (me["scope"], me["role"], me["account"]["id"]) == ("account", "owner", account.id)
        # The link was one-time: another browser cannot use it.
        with sso.browser() as late:
            assert late.get(issued["link"]).status_code == 400
        made = ok(sso.write(olivia, "POST", "/invites", {"role": "member"}), 201)
        assert made["account_id"] == account.id and made["created_by"] == "Olivia <olivia@example.com>"

        with joined(sso, made["link"], "Mark") as mark:
            assert ok(mark.get("/admin/api/me"))["role"] == "member"
            marks = ok(sso.write(mark, "POST", "/keys", {"group": "Basic", "name": "mark's"}), 201)
            olivias = ok(sso.write(olivia, "POST", "/keys", {"group": "Basic", "name": "olivia's"}), 201)
            # A member lists and reaches only their own keys; an owner sees every key of the account.
            assert [k["id"] for k in ok(mark.get("/admin/api/keys"))["data"]] == [marks["id"]]
            assert {k["id"] for k in ok(olivia.get("/admin/api/keys"))["data"]} == {
                marks["id"],
                olivias["id"],
            }
            for method, suffix, body in [
                ("GET", "", None),
                ("PATCH", "", {"rpm": 1}),
                ("POST", "/rotate", {"grace_seconds": 0}),
                ("POST", "/revoke", None),
            ]:
                theirs = sso.write(mark, method, f"/keys/{olivias['id']}{suffix}", body)
                missing = sso.write(mark, method, f"/keys/key_ZZZZZZZZZZZZZZZZ{suffix}", body)
                assert theirs.status_code == missing.status_code == 404
                assert theirs.json()["error"]["message"].replace(olivias["id"], "K") == missing.json()[
                    "error"
                ]["message"].replace("key_ZZZZZZZZZZZZZZZZ", "K")
            assert ok(sso.write(mark, "PATCH", f"/keys/{marks['id']}", {"rpm": 7}))["rpm"] == 7
            # Another member's key is just as out of reach.
            second = ok(sso.write(olivia, "POST", "/invites", {"role": "member"}), 201)
            with joined(sso, second["link"], "Nina") as nina:
                ninas = ok(sso.write(nina, "POST", "/keys", {"group": "Basic", "name": "nina's"}), 201)
                assert [k["id"] for k in ok(nina.get("/admin/api/keys"))["data"]] == [ninas["id"]]
                assert sso.write(mark, "POST", f"/keys/{ninas['id']}/revoke").status_code == 404
                assert sso.write(nina, "PATCH", f"/keys/{marks['id']}", {"rpm": 1}).status_code == 404
                assert ok(nina.get(f"/admin/api/keys/{ninas['id']}"))["state"] == "active"
            # The owner manages the member's key too.
            assert ok(sso.write(olivia, "POST", f"/keys/{marks['id']}/revoke"))["state"] == "disabled"
            # Members change nothing about people or tokens.
            assert sso.write(mark, "POST", "/invites", {"role": "member"}).status_code == 403
            mark_id = next(
                m["person_id"]
                for m in ok(mark.get(f"/admin/api/accounts/{account.id}/members"))["data"]
                if m["name"] == "Mark"
            )
            assert (
                sso.write(
                    mark, "PATCH", f"/accounts/{account.id}/members/{mark_id}", {"role": "owner"}
                ).status_code
                == 403
            )
            assert mark.get("/admin/api/tokens").status_code == 403
            # The last owner cannot step down; after promoting Mark, Olivia can.
            olivia_id = (
                ok(sso.session(olivia))["person"]["id"] if False else sso.session(olivia)["person"]["id"]
            )
            demote = sso.write(
                olivia, "PATCH", f"/accounts/{account.id}/members/{olivia_id}", {"role": "member"}
            )
            assert demote.status_code == 409
            promoted = ok(
                sso.write(olivia, "PATCH", f"/accounts/{account.id}/members/{mark_id}", {"role": "owner"})
            )
            assert promoted["role"] == "owner"
            assert ok(mark.get("/admin/api/me"))["role"] == "owner"  # applies from the next request
            # Removing a member ends their session with their next request.
            removed = ok(sso.write(olivia, "DELETE", f"/accounts/{account.id}/members/{mark_id}"))
            assert removed["removed"] is True
            gone = mark.get("/admin/api/me")
            assert gone.status_code == 401 and "no longer a member" in gone.json()["error"]["message"]
    # The audit log names the people who did each thing (oldest first here).
    entries = ok(operator.get("/audit", params={"account_id": account.id, "limit": 500}))["data"][::-1]
    done = [(e["actor"], e["action"]) for e in entries if e["action"].startswith(("member.", "key.create"))]
    olivia_name, mark_name = "Olivia <olivia@example.com>", "Mark <mark@example.com>"
    assert done[0][0].startswith("tok_") and done[0][1] == "member.invite"  # the operator's token
    assert done[1:5] == [
        (olivia_name, "member.join"),
        (olivia_name, "member.invite"),
        (mark_name, "member.join"),
        (mark_name, "key.create"),
    ]
    assert (olivia_name, "member.update") in done and done[-1] == (olivia_name, "member.remove")
    assert all("mg-inv-" not in str(e) for e in entries)  # never an invitation's token


def test_other_accounts_members_and_invitations_answer_like_missing_ones(
    sso: SsoSetup, operator: httpx.Client
) -> None:
    mine, theirs = sso.gateway.account("iso-mine"), sso.gateway.account("iso-theirs")
    with (
        joined(sso, invite(operator, mine)["link"], "Ivy") as ivy,
        joined(sso, invite(operator, theirs)["link"], "Tom") as tom,
    ):
        tom_id = sso.session(tom)["person"]["id"]
        their_invite = invite(operator, theirs, "member")["id"]
        pairs = [
            (
                "PATCH",
                f"/accounts/{mine.id}/members/{tom_id}",
                f"/accounts/{mine.id}/members/person_ZZZZ",
                {"role": "member"},
            ),
            (
                "DELETE",
                f"/accounts/{mine.id}/members/{tom_id}",
                f"/accounts/{mine.id}/members/person_ZZZZ",
                None,
            ),
            (
                "PATCH",
                f"/accounts/{theirs.id}/members/{tom_id}",
                "/accounts/987654321/members/person_ZZZZ",
                {"role": "member"},
            ),
            ("DELETE", f"/invites/{their_invite}", "/invites/inv_ZZZZ", None),
            ("GET", f"/accounts/{theirs.id}/members", "/accounts/987654321/members", None),
        ]
        for method, foreign, missing, body in pairs:
            a, b = sso.write(ivy, method, foreign, body), sso.write(ivy, method, missing, body)
            assert a.status_code == b.status_code == 404, (method, foreign, a.text)
            assert a.json()["error"]["type"] == b.json()["error"]["type"] == "not_found_error"
        assert [m["name"] for m in ok(tom.get(f"/admin/api/accounts/{theirs.id}/members"))["data"]] == ["Tom"]
        states = [i["state"] for i in ok(operator.get("/invites", params={"account_id": theirs.id}))["data"]]
        assert sorted(states) == ["open", "used"]


def test_an_expired_or_withdrawn_invitation_is_refused(
    sso: SsoSetup, operator: httpx.Client, clock: ManualClock
) -> None:
    account = sso.gateway.account("late-team")
    withdrawn = invite(operator, account)
    assert ok(operator.delete(f"/invites/{withdrawn['id']}"))["revoked"] is True
    with sso.browser() as browser:
        refused = browser.get(withdrawn["link"])
        assert refused.status_code == 400 and "invitation" in refused.json()["error"]["message"]
    expiring = invite(operator, account)
    clock.advance(TTL + 1)
    with sso.browser() as browser:
        assert browser.get(expiring["link"]).status_code == 400
    listed = ok(operator.get("/invites", params={"account_id": account.id}))["data"]
    assert [i["state"] for i in listed] == ["expired"]


def cli(sso: SsoSetup, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELGATE_")}
    env["MODELGATE_SECRET"] = str(sso.gateway.settings.secret)  # digests agree with the server's
    data_dir = sso.gateway.settings.data_dir
    result = subprocess.run(
        [sys.executable, "-m", "modelgate", *args, "--json", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=data_dir,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr or result.stdout
    return orjson.loads(result.stdout)


def test_the_cli_invites_an_accounts_first_owner(sso: SsoSetup) -> None:
    account = sso.gateway.account("cli-team")
    made = cli(
        sso, "invites", "create", "--account", "cli-team", "--role", "owner", "--email", "first@example.com"
    )
    assert (
        made["account_id"] == account.id and made["role"] == "owner" and made["token"].startswith("mg-inv-")
    )
    listed = cli(sso, "invites", "list", "--account", "cli-team")
    assert [(i["id"], i["state"]) for i in listed] == [(made["id"], "open")] and "token" not in listed[0]
    with joined(sso, made["link"], "Cleo") as cleo:
        assert ok(cleo.get("/admin/api/me"))["role"] == "owner"
    members = cli(sso, "members", "list", "--account", "cli-team")
    assert [(m["name"], m["role"]) for m in members] == [("Cleo", "owner")]
    assert cli(sso, "invites", "list", "--account", "cli-team")[0]["state"] == "used"

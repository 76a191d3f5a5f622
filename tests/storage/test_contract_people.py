"""People, sessions, sign-ins, members and invitations: the same contract on both engines."""

from __future__ import annotations

import pytest

from modelgate.storage.audit import AuditDraft, AuditFilter, Subject
from modelgate.storage.base import Store
from modelgate.storage.people import Invite, Member, PeopleStore
from tests.whole_store import WholeStore

ISSUER = "https://idp.example.com"


def people_of(store: Store) -> PeopleStore:
    assert isinstance(store, WholeStore)
    return store.people


async def test_a_person_is_keyed_by_issuer_and_subject(store: Store) -> None:
    people = people_of(store)
    first = await people.upsert_person("person_a", ISSUER, "sub-1", "a@example.com", "A", 100.0)
    again = await people.upsert_person("person_b", ISSUER, "sub-1", "new@example.com", "A2", 200.0)
    assert again.id == first.id == "person_a"
    assert (again.email, again.name, again.created_at, again.last_login_at) == (
        "new@example.com",
        "A2",
        100.0,
        200.0,
    )
    elsewhere = await people.upsert_person("person_c", "https://other.example.com", "sub-1", "", "", 300.0)
    assert elsewhere.id == "person_c"
    assert await people.get_person("person_a") == again
    assert await people.get_person("person_zzz") is None


async def test_a_pending_sign_in_is_taken_exactly_once(store: Store) -> None:
    people = people_of(store)
    await people.save_login(b"state-1", b"browser", "verifier", "nonce", None, 10.0)
    await people.save_login(b"state-2", b"browser", "verifier", "nonce", b"invite", 50.0)
    taken = await people.take_login(b"state-1")
    assert taken is not None and (taken.verifier, taken.nonce, taken.invite_digest) == (
        "verifier",
        "nonce",
        None,
    )
    assert await people.take_login(b"state-1") is None
    assert await people.prune_logins(100.0) == 1
    assert await people.take_login(b"state-2") is None


async def test_sessions_are_found_by_digest_touched_and_pruned(store: Store) -> None:
    people = people_of(store)
    person = await people.upsert_person("person_s", ISSUER, "sub-s", "s@example.com", "S", 0.0)
    await people.create_session(b"d1", person.id, None, "operator", "csrf-1", 10.0, 1000.0)
    await people.create_session(b"d2", person.id, None, "operator", "csrf-2", 10.0, 1000.0)
    found = await people.find_session(b"d1")
    assert found is not None and found.person == person and found.role == "operator"
    assert (found.csrf, found.last_seen_at, found.expires_at, found.account_id) == (
        "csrf-1",
        10.0,
        1000.0,
        None,
    )
    await people.touch_session(b"d1", 500.0)
    touched = await people.find_session(b"d1")
    assert touched is not None and touched.last_seen_at == 500.0
    # Alive: used since the idle cut and before the absolute end.
    assert await people.count_sessions(idle_before=10.0, now=600.0) == 2
    assert await people.count_sessions(idle_before=100.0, now=600.0) == 1  # d2 idle since 10
    assert await people.count_sessions(idle_before=100.0, now=1000.0) == 0  # both at their end
    assert await people.prune_sessions(idle_before=100.0, now=600.0) == 1  # d2 idle since 10
    assert await people.find_session(b"d2") is None
    await people.delete_session(b"d1")
    assert await people.find_session(b"d1") is None


async def test_a_session_is_rotated_once_to_a_new_id(store: Store) -> None:
    people = people_of(store)
    person = await people.upsert_person("person_r", ISSUER, "sub-r", "r@example.com", "R", 0.0)
    await people.create_session(b"old", person.id, None, "operator", "csrf-r", 10.0, 5000.0)
    assert await people.rotate_session(b"old", b"new", 100.0, 130.0)
    new = await people.find_session(b"new")
    old = await people.find_session(b"old")
    assert new is not None and old is not None
    assert (new.person, new.role, new.csrf, new.created_at, new.expires_at) == (
        person,
        "operator",
        "csrf-r",
        100.0,
        5000.0,
    )
    assert old.expires_at == 130.0
    # Already rotated (it ends by then), or gone: nothing happens.
    assert not await people.rotate_session(b"old", b"newer", 110.0, 140.0)
    assert await people.find_session(b"newer") is None
    assert not await people.rotate_session(b"missing", b"x", 110.0, 140.0)


async def test_members_invitations_and_key_owners(store: Store) -> None:
    people = people_of(store)
    account = await store.create_account("members-contract", 0, 0.0)
    owner = await people.upsert_person("person_o", ISSUER, "sub-o", "o@example.com", "O", 0.0)
    guest = await people.upsert_person("person_g", ISSUER, "sub-g", "g@example.com", "G", 0.0)
    member = await people.put_member(account.id, owner.id, "owner", 1.0)
    assert (member.account_id, member.person, member.role) == (account.id, owner, "owner")
    invite = await people.create_invite(
        "inv_1", b"inv-digest", account.id, "member", "", owner.id, 2.0, 100.0
    )
    assert await people.invites(account.id) == [invite] == await people.invites(None)
    assert await people.find_invite(b"inv-digest") == invite
    assert await people.use_invite(b"inv-digest", guest.id, 200.0) is None  # expired
    used = await people.use_invite(b"inv-digest", guest.id, 50.0)
    assert used is not None and (used.used_at, used.used_by) == (50.0, guest.id)
    assert await people.use_invite(b"inv-digest", owner.id, 60.0) is None  # one time only
    members = await people.members(account.id)
    assert [(m.person.id, m.role) for m in members] == [(owner.id, "owner"), (guest.id, "member")]
    assert [m.account_id for m in await people.memberships(guest.id)] == [account.id]
    promoted = await people.put_member(account.id, guest.id, "owner", 70.0)
    assert promoted.role == "owner" and promoted.created_at == 50.0
    assert await people.remove_member(account.id, guest.id)
    assert not await people.remove_member(account.id, guest.id)
    assert await people.member(account.id, guest.id) is None
    assert await people.delete_invite("inv_1") and await people.get_invite("inv_1") is None
    # An owner who opens a member invitation stays an owner.
    await people.create_invite("inv_2", b"inv-2", account.id, "member", "", owner.id, 80.0, 1000.0)
    assert await people.use_invite(b"inv-2", owner.id, 90.0) is not None
    kept = await people.member(account.id, owner.id)
    assert kept is not None and kept.role == "owner"
    await people.set_key_owner("key_1", guest.id, account.id)
    await people.set_key_owner("key_1", owner.id, account.id)  # the first owner stays
    assert await people.key_owner("key_1") == guest.id
    assert await people.key_owner("key_2") is None
    assert await people.owned_keys(guest.id, account.id) == ["key_1"]


def _role(member: Member) -> Subject:
    return Subject(f"person:{member.person.id}", member.account_id, {"role": member.role})


def _broken(member: Member) -> Subject:
    raise RuntimeError("the audit entry could not be made")


async def test_member_changes_are_audited_in_their_own_transaction(store: Store) -> None:
    people = people_of(store)
    account = await store.create_account("members-audited", 0, 0.0)
    person = await people.upsert_person("person_au", ISSUER, "sub-au", "au@example.com", "Au", 0.0)
    joined = await people.put_member(account.id, person.id, "member", 1.0)
    draft = AuditDraft(2.0, "owner-x", "member.update", _role, before={"role": "member"})
    promoted = await people.put_member(account.id, person.id, "owner", 2.0, audit=draft)
    assert promoted.role == "owner"
    # An entry that cannot be written takes the change with it: the role stays.
    failing = AuditDraft(3.0, "owner-x", "member.update", _broken, before={"role": "owner"})
    with pytest.raises(RuntimeError):
        await people.put_member(account.id, person.id, "member", 3.0, audit=failing)
    with pytest.raises(RuntimeError):
        await people.remove_member(
            account.id, person.id, audit=AuditDraft(3.5, "owner-x", "member.remove", _broken)
        )
    kept = await people.member(account.id, person.id)
    assert kept is not None and kept.role == "owner"
    removal = AuditDraft(4.0, "owner-x", "member.remove", _role, before={"role": "owner"})
    assert await people.remove_member(account.id, person.id, audit=removal)
    assert not await people.remove_member(account.id, person.id, audit=removal)  # no second entry
    entries = await store.audit_page(AuditFilter(account_id=account.id), limit=10)
    assert [(e.action, e.actor, e.target, e.before, e.after) for e in entries[::-1]] == [
        ("member.update", "owner-x", f"person:{person.id}", {"role": "member"}, {"role": "owner"}),
        ("member.remove", "owner-x", f"person:{person.id}", {"role": "owner"}, None),
    ]
    assert joined.role == "member"


def _invited(invite: Invite) -> Subject:
    return Subject(f"invite:{invite.id}", invite.account_id, {"role": invite.role})


async def test_invitations_are_audited_in_their_own_transaction(store: Store) -> None:
    people = people_of(store)
    account = await store.create_account("invites-audited", 0, 0.0)
    made = AuditDraft(1.0, "owner-y", "member.invite", _invited)
    invite = await people.create_invite(
        "inv_au", b"inv-au", account.id, "member", "", "owner-y", 1.0, 100.0, audit=made
    )
    # An entry that cannot be written takes the invitation with it (or keeps it, for a revoke).
    broken = AuditDraft(2.0, "owner-y", "member.invite", _broken_invite)
    with pytest.raises(RuntimeError):
        await people.create_invite(
            "inv_no", b"inv-no", account.id, "member", "", "owner-y", 2.0, 100.0, audit=broken
        )
    assert await people.get_invite("inv_no") is None
    with pytest.raises(RuntimeError):
        await people.delete_invite(invite.id, audit=broken)
    assert await people.get_invite(invite.id) == invite
    revoked = AuditDraft(3.0, "owner-y", "member.invite_revoke", _invited, before={"role": "member"})
    assert await people.delete_invite(invite.id, audit=revoked)
    assert not await people.delete_invite(invite.id, audit=revoked)
    entries = await store.audit_page(AuditFilter(account_id=account.id), limit=10)
    assert [(e.action, e.target, e.before, e.after) for e in entries[::-1]] == [
        ("member.invite", "invite:inv_au", None, {"role": "member"}),
        ("member.invite_revoke", "invite:inv_au", {"role": "member"}, None),
    ]


def _broken_invite(invite: Invite) -> Subject:
    raise RuntimeError("the audit entry could not be made")


def _joined(invite: Invite) -> Subject:
    return Subject(f"person:{invite.used_by}", invite.account_id, {"role": invite.role, "invite": invite.id})


async def test_joining_with_an_invitation_is_audited_in_its_own_transaction(store: Store) -> None:
    people = people_of(store)
    account = await store.create_account("join-audited", 0, 0.0)
    person = await people.upsert_person("person_jn", ISSUER, "sub-jn", "jn@example.com", "Jn", 0.0)
    await people.create_invite("inv_jn", b"inv-jn", account.id, "member", "", "owner-z", 1.0, 100.0)
    # An entry that cannot be written takes the join with it: the invitation stays unused and
    # the person is no member.
    broken = AuditDraft(2.0, "Jn <jn@example.com>", "member.join", _broken_invite)
    with pytest.raises(RuntimeError):
        await people.use_invite(b"inv-jn", person.id, 2.0, audit=broken)
    assert await people.member(account.id, person.id) is None
    unused = await people.get_invite("inv_jn")
    assert unused is not None and unused.used_at is None and unused.used_by is None
    assert await store.audit_page(AuditFilter(account_id=account.id), limit=10) == []
    joined = AuditDraft(3.0, "Jn <jn@example.com>", "member.join", _joined)
    used = await people.use_invite(b"inv-jn", person.id, 3.0, audit=joined)
    assert used is not None and used.used_by == person.id
    member = await people.member(account.id, person.id)
    assert member is not None and member.role == "member"
    assert await people.use_invite(b"inv-jn", person.id, 4.0, audit=joined) is None  # no second entry
    entries = await store.audit_page(AuditFilter(account_id=account.id), limit=10)
    assert [(e.at, e.action, e.actor, e.target, e.before, e.after) for e in entries] == [
        (
            3.0,
            "member.join",
            "Jn <jn@example.com>",
            f"person:{person.id}",
            None,
            {"role": "member", "invite": "inv_jn"},
        )
    ]

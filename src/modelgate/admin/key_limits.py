"""Who may change a key's ticket-held limits (``tpm``, ``max_concurrency``) through the admin API.

An operator sets, raises and removes them. A key's owner (an account token) may only lower them:
a new value at or below the one in force, on a key that has one. Raising, removing, or setting a
limit on a key that has none (which lifts nothing, but is still the operator's call: the operator
set the key up without it) is refused with 403, so an owner cannot undo what the operator set.
Where the key's account has the limit, the limit in force on a key without one is the account's:
an owner may set the key's within it.

An account's own rate limits (``PATCH /accounts/{id}``) are the operator's alone (the handler
requires an operator before this module is asked).
"""

from __future__ import annotations

from modelgate.admin.http import forbidden
from modelgate.admin.schemas import AccountRename, KeyUpdate
from modelgate.limits.key_limits import KeyLimits
from modelgate.storage.base import Account, AccountLimits, KeyRecord

#: The limits this module governs: name on the wire = field of ``KeyRecord`` and ``KeyUpdate``.
HELD_LIMITS = ("tpm", "max_concurrency")


def held_limit_changes(
    record: KeyRecord, body: KeyUpdate, given: set[str], operator: bool, account: KeyLimits | None = None
) -> dict[str, int]:
    """``management.update_key`` keyword arguments for the limits in ``given``: the new value,
    or ``-1`` to remove it (``null`` in the body). A 403 when an owner would not only lower one
    (``account``: the key's account's limits, in force where the key has none)."""
    changes: dict[str, int] = {}
    for name in HELD_LIMITS:
        if name not in given:
            continue
        value: int | None = getattr(body, name)
        current: int | None = getattr(record, name)
        if current is None and account is not None:
            current = getattr(account, name)
        if not operator and (current is None or value is None or value > current):
            allowed = "no limit is set" if current is None else f"to at most {current}"
            raise forbidden(f"{name}: a key's owner may only lower it ({allowed}); ask an operator")
        changes[name] = -1 if value is None else value
    return changes


def member_lowers_only(record: KeyRecord, rpm: int | None, cap_given: bool, cap_uc: int | None) -> None:
    """A member (not an owner) of an account may only lower their own key's ``rpm`` and
    ``monthly_cap``: never raise them, and never clear the cap (no cap is no bound at all). 403
    otherwise; the owner or an operator changes them."""
    if rpm is not None and rpm > record.rpm:
        raise forbidden(f"rpm: a member may only lower it (to at most {record.rpm}); ask an owner")
    if cap_given and (record.monthly_cap_uc is None or cap_uc is None or cap_uc > record.monthly_cap_uc):
        allowed = "no cap is set" if record.monthly_cap_uc is None else "a lower cap only"
        raise forbidden(f"monthly_cap: a member may only lower it ({allowed}); ask an owner")


def member_new_key_rpm(rpm: int | None, default_rpm: int) -> None:
    """A member's new key runs at the server's ``keys.default_rpm`` or below (403 above it)."""
    if rpm is not None and rpm > default_rpm:
        raise forbidden(f"rpm: a member's new key may have at most keys.default_rpm ({default_rpm})")


#: The account rate limits ``PATCH /accounts/{id}`` takes.
ACCOUNT_LIMITS = ("rpm", "tpm", "max_concurrency")


def account_limit_changes(account: Account, body: AccountRename) -> AccountLimits | None:
    """The account's limits after the change (absent fields stay, ``null`` removes), or None
    when the body names none of them."""
    given = body.model_fields_set & set(ACCOUNT_LIMITS)
    if not given:
        return None
    values = {name: getattr(body if name in given else account, name) for name in ACCOUNT_LIMITS}
    return AccountLimits(**values)

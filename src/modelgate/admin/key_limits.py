"""Who may change a key's ticket-held limits (``tpm``, ``max_concurrency``) through the admin API.

An operator sets, raises and removes them. A key's owner (an account token) may only lower them:
a new value at or below the one in force, on a key that has one. Raising, removing, or setting a
limit on a key that has none (which lifts nothing, but is still the operator's call: the operator
set the key up without it) is refused with 403, so an owner cannot undo what the operator set.
"""

from __future__ import annotations

from modelgate.admin.http import forbidden
from modelgate.admin.schemas import KeyUpdate
from modelgate.storage.base import KeyRecord

#: The limits this module governs: name on the wire = field of ``KeyRecord`` and ``KeyUpdate``.
HELD_LIMITS = ("tpm", "max_concurrency")


def held_limit_changes(record: KeyRecord, body: KeyUpdate, given: set[str], operator: bool) -> dict[str, int]:
    """``management.update_key`` keyword arguments for the limits in ``given``: the new value,
    or ``-1`` to remove it (``null`` in the body). A 403 when an owner would not only lower one."""
    changes: dict[str, int] = {}
    for name in HELD_LIMITS:
        if name not in given:
            continue
        value: int | None = getattr(body, name)
        current: int | None = getattr(record, name)
        if not operator and (current is None or value is None or value > current):
            allowed = "no limit is set" if current is None else f"to at most {current}"
            raise forbidden(f"{name}: a key's owner may only lower it ({allowed}); ask an operator")
        changes[name] = -1 if value is None else value
    return changes

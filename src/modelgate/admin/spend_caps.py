"""Spend caps by window through the admin API: reading ``caps`` / ``caps_uc`` from a body, and
who may change which (``storage.spend_windows`` has what a window is).

An operator sets, raises and removes any cap, on keys and on accounts (``PATCH
/admin/api/accounts/{id}``: operators only, like every account change). A key's owner or member
may only set or lower a cap of their key: a value at or below the one in force (any value where
none is set: it only restricts), never raise or remove one, so nobody but the operator undoes
what the operator set. No setting makes a window shorter: the windows are fixed.
"""

from __future__ import annotations

from modelgate.admin.http import bad_request, forbidden
from modelgate.admin.schemas import CapsCredits, CapsMicro
from modelgate.management import ManagementError, parse_credits
from modelgate.storage.base import KeyRecord
from modelgate.storage.spend_windows import KEY_WINDOWS, WINDOWS, Window


def cap_changes(
    caps: CapsCredits | None, caps_uc: CapsMicro | None, windows: tuple[Window, ...] = WINDOWS
) -> dict[Window, int]:
    """The caps a body changes, by window: µc, or ``-1`` to remove one (``null``); 400 for a
    window given twice (credits and µc) or one not settable here."""
    changes: dict[Window, int] = {}
    for window, value in (caps_uc or {}).items():
        changes[window] = -1 if value is None else value
    for window, text in (caps or {}).items():
        if window in changes:
            raise bad_request(f"caps.{window}: give it in caps or in caps_uc, not both")
        try:
            changes[window] = -1 if text is None else parse_credits(text, f"caps.{window}")
        except ManagementError as exc:
            raise bad_request(str(exc)) from None
    for window in changes:
        if window not in windows:
            where = "monthly_cap" if window == "month" else ", ".join(windows)
            raise bad_request(f"caps.{window}: not settable here (use {where})")
    return changes


def key_cap_changes(
    record: KeyRecord, caps: CapsCredits | None, caps_uc: CapsMicro | None, operator: bool
) -> dict[Window, int]:
    """A key's cap changes (``5h``, ``day``, ``week``); a 403 when someone other than an operator
    would raise or remove one."""
    changes = cap_changes(caps, caps_uc, KEY_WINDOWS)
    if not operator:
        current = dict(zip(WINDOWS, record.window_caps, strict=True))
        for window, value in changes.items():
            now = current[window]
            if value == -1 or (now is not None and value > now):
                allowed = "any value while none is set" if now is None else "a lower cap only"
                raise forbidden(
                    f"caps.{window}: a key's owner may only lower it ({allowed}); ask an operator"
                )
    return changes

"""What the audit log shows of a record: its fields as plain JSON values, never a secret or a
digest. Fields are read from the record itself, so a field added to a record later (a key's
expiry, its address rules) appears in the log without an edit here; names that speak of a secret
or a digest, and raw bytes, are always left out."""

from __future__ import annotations

import dataclasses
from typing import Any

from modelgate.storage.audit import State, Subject
from modelgate.storage.records import Account, AdminToken, KeyRecord

#: Never in the log, whatever the record: secrets and what is derived from them.
_HIDDEN_WORDS = ("digest", "secret", "password", "token_hash")
#: Bookkeeping that changes without anyone acting (requests in flight, last use).
_NOISE = frozenset({"reserved_uc", "last_used_at", "version"})


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list | frozenset | set):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def state_of(record: Any) -> State:
    """A dataclass record's fields as JSON values, without secrets, digests and bookkeeping."""
    out: State = {}
    for item in dataclasses.fields(record):
        name = item.name
        if name in _NOISE or any(word in name for word in _HIDDEN_WORDS):
            continue
        value = getattr(record, name)
        if isinstance(value, bytes | bytearray | memoryview):
            continue
        out[name] = _plain(value)
    return out


def account(record: Account) -> Subject:
    return Subject(f"account:{record.id}", record.id, state_of(record))


def key(record: KeyRecord) -> Subject:
    return Subject(f"key:{record.id}", record.account_id, state_of(record))


def token(record: AdminToken) -> Subject:
    return Subject(f"token:{record.id}", record.account_id, state_of(record))

"""Authentication against an in-memory view of the keys, kept fresh from the database.

No database round trip per request: the view loads every key at start, then polls for keys whose
``version`` went up (every ``keys.refresh_interval`` seconds, default 0.25 s). A revocation or
rotation made by any process (CLI, admin API, another instance) is therefore honoured within one
refresh interval.

Both loads, the first and every poll, are the same incremental catch-up: changes since the view's
version are read in pages of ``PAGE_KEYS`` (SQLite reads them on its reader thread, off the event
loop) and applied in slices of ``SLICE_KEYS``, yielding to the event loop between slices, so no
number of keys holds requests up for more than about a millisecond. There is no periodic full
reload: versions become visible in increasing order on both engines (``storage.sqlite_keys``,
``storage.postgres_keys``) and keys are never deleted, so changes since a version are complete.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import logging
import time
from collections.abc import Callable, Mapping

from modelgate.addresses import NO_NETWORKS, AddressError, Networks
from modelgate.errors import AuthenticationFailed
from modelgate.formats.format import Credentials
from modelgate.keys import KEY_PREFIX, Digester, is_well_formed_key
from modelgate.periodic import cancel_and_wait
from modelgate.storage.base import KeyRecord, KeyStore

log = logging.getLogger("modelgate.auth")
#: Key records read from the database per query while catching up.
PAGE_KEYS = 2000
#: Key records applied to the view between two yields to the event loop (each is a few
#: dictionary updates: a slice is well under a millisecond).
SLICE_KEYS = 250
#: Each time the view has grown by this many keys (at start, or later by polls), the process's
#: objects are frozen out of the cyclic garbage collector (``KeyView._freeze_if_grown``).
FREEZE_AT_START_KEYS = 10_000

_SEND_GATEWAY_KEY = (
    "send your modelgate key (sk-cs4-…) as the x-api-key header (ALPHA_API_KEY / ANTHROPIC_API_KEY) "
    "or as Authorization: Bearer"
)


#: Where every client may send its key: ``x-api-key`` or ``Authorization: Bearer``.
DEFAULT_CREDENTIALS = Credentials()


def _where_to_send(credentials: Credentials) -> str:
    """The hint of a missing key: the format's own key header and query parameter first."""
    if credentials.headers[:1] == ("x-api-key",) and credentials.query is None:
        return _SEND_GATEWAY_KEY
    where = f"the {credentials.headers[0]} header" if credentials.headers else "Authorization: Bearer"
    if credentials.query is not None:
        where += f" or the {credentials.query} query parameter"
    return f"send your modelgate key (sk-cs4-…) as {where}"


class KeyView:
    def __init__(self, store: KeyStore, digester: Digester) -> None:
        self._store = store
        self._digester = digester
        self._by_id: dict[str, KeyRecord] = {}
        self._by_digest: dict[bytes, str] = {}
        #: Each restricted key's ``allowed_ips`` compiled, with the version it was compiled at:
        #: compiled once per key version, never per request.
        self._networks: dict[str, tuple[int, Networks]] = {}
        self._version = 0
        #: Keys in the view when its objects were last frozen out of the collector.
        self._frozen_keys = 0
        #: Growth (in keys) that freezes them again; 0 never does.
        self._freeze_step = 0
        self._task: asyncio.Task[None] | None = None
        #: ``time.monotonic()`` of the last successful poll of the database (metrics: the age
        #: of what this view serves).
        self.refreshed_at: float | None = None
        #: Called with every change this process made (``apply``); the gateway sets it to the
        #: Redis key-change broadcast so other instances refresh at once (``modelgate.broadcast``).
        self.on_local_change: Callable[[KeyRecord], None] | None = None

    @property
    def version(self) -> int:
        return self._version

    def get(self, key_id: str) -> KeyRecord | None:
        return self._by_id.get(key_id)

    def expiring(self, start: float, end: float) -> list[KeyRecord]:
        """Active keys whose ``expires_at`` falls in ``[start, end)``, soonest first (for an alert
        ahead of expiry: ``start`` now, ``end`` now plus the notice)."""
        due = [
            k
            for k in self._by_id.values()
            if k.state == "active" and k.expires_at is not None and start <= k.expires_at < end
        ]
        return sorted(due, key=lambda k: (k.expires_at or 0.0, k.id))

    def networks(self, key: KeyRecord) -> Networks | None:
        """The ranges ``key`` may be used from, compiled; None: from anywhere."""
        if not key.allowed_ips:
            return None
        compiled = self._networks.get(key.id)
        if compiled is None or compiled[0] != key.version:
            try:
                networks = Networks.compile(key.allowed_ips)
            except AddressError:  # written past validation: match nothing rather than anything
                log.warning("key %s: unreadable allowed_ips; the key is refused everywhere", key.id)
                networks = NO_NETWORKS
            compiled = (key.version, networks)
            self._networks[key.id] = compiled
        return compiled[1]

    def _apply(self, records: list[KeyRecord], *, advance: bool = True) -> None:
        for record in records:
            old = self._by_id.get(record.id)
            if old is not None and old.version > record.version:
                continue  # a poll that started before a change we already applied
            if old is not None:
                self._by_digest.pop(old.digest, None)
                if old.previous_digest is not None:
                    self._by_digest.pop(old.previous_digest, None)
            self._by_id[record.id] = record
            if record.allowed_ips:
                self.networks(record)  # compiled here unless this version already is
            else:
                self._networks.pop(record.id, None)
            self._by_digest[record.digest] = record.id
            if record.previous_digest is not None:
                self._by_digest[record.previous_digest] = record.id
            if advance:
                self._version = max(self._version, record.version)

    def __len__(self) -> int:
        return len(self._by_id)

    async def refresh(self) -> None:
        """Catch up with every change since this view's version, page by page, slice by slice."""
        while True:
            page = await self._store.keys_changed_since(self._version, limit=PAGE_KEYS)
            for start in range(0, len(page), SLICE_KEYS):
                if start:
                    await asyncio.sleep(0)
                self._apply(page[start : start + SLICE_KEYS])
            if len(page) < PAGE_KEYS:
                break
            await asyncio.sleep(0)
        self.refreshed_at = time.monotonic()
        self._freeze_if_grown()

    def _freeze_if_grown(self) -> None:
        """Move every object alive out of the cyclic collector's care once the view has grown by
        ``_freeze_step`` keys since the last time (``gc.freeze``).

        Each key is a few objects the collector tracks: 100,000 keys add about 27 ms to every full
        collection (a million, about 0.3 s), paid by whatever request runs then. Frozen, they are
        never traversed again, and a key replaced later is still freed by its reference count.
        At start nothing else is alive yet; later (keys bulk-created while serving) the objects of
        requests in flight are frozen too: those are freed by their reference counts as well, and
        only garbage in reference cycles among them stays, once per ``_freeze_step`` new keys.
        """
        if self._freeze_step and len(self._by_id) - self._frozen_keys >= self._freeze_step:
            gc.freeze()
            self._frozen_keys = len(self._by_id)

    def apply(self, record: KeyRecord) -> None:
        """Take a change this process made without waiting for the next poll, and announce it.

        The poll cursor stays where it is: another process may have committed a lower version
        that this view has not polled yet, and moving past it would skip that change for good. The next poll reads this record again, which is harmless.
        """
        self._apply([record], advance=False)
        if self.on_local_change is not None:
            self.on_local_change(record)

    async def start(self, interval: float, freeze_at: int = FREEZE_AT_START_KEYS) -> None:
        self._freeze_step = freeze_at
        await self.refresh()
        self._task = asyncio.create_task(self._poll(interval), name="modelgate-key-refresh")

    async def _poll(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.refresh()
            except Exception:  # the view keeps serving what it has; the next poll retries
                log.warning("key refresh failed; serving the last known keys", exc_info=True)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def authenticate(
        self,
        headers: Mapping[str, str],
        now: float,
        credentials: Credentials = DEFAULT_CREDENTIALS,
        query: Mapping[str, str] | None = None,
    ) -> KeyRecord:
        """The active key presented where the format's clients send it (``Format.credentials``):
        its key headers (``x-api-key``) first, then ``Authorization: Bearer``, then its query
        parameter."""
        secret = None
        for header in credentials.headers:
            secret = headers.get(header)
            if secret:
                break
        if not secret and credentials.bearer:
            authorization = headers.get("authorization", "")
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                secret = value.strip()
                if not secret.startswith(KEY_PREFIX):
                    raise AuthenticationFailed(
                        "the bearer token is not a modelgate API key (OAuth tokens and ALPHA_AUTH_TOKEN "
                        f"are not accepted); {_SEND_GATEWAY_KEY}"
                    )
        if not secret and credentials.query is not None and query is not None:
            secret = query.get(credentials.query)
        if not secret:
            raise AuthenticationFailed(f"missing API key: {_where_to_send(credentials)}")
        secret = secret.strip()
        if not is_well_formed_key(secret):
            raise AuthenticationFailed("invalid API key: not a well-formed sk-cs4- key (check for typos)")
        digest = self._digester.digest(secret)
        key_id = self._by_digest.get(digest)
        record = self._by_id.get(key_id) if key_id is not None else None
        if record is None:
            raise AuthenticationFailed("invalid API key")
        if hmac.compare_digest(record.digest, digest):
            pass
        elif record.previous_digest is not None and hmac.compare_digest(record.previous_digest, digest):
            if record.previous_expires_at is None or record.previous_expires_at <= now:
                raise AuthenticationFailed(
                    "invalid API key: this secret was rotated and its grace period is over"
                )
        else:  # pragma: no cover - the digest maps to this key, so one of the two matches
            raise AuthenticationFailed("invalid API key")
        if record.state != "active":
            raise AuthenticationFailed("this API key has been revoked")
        return record

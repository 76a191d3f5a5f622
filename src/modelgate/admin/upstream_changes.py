"""What the upstream endpoints share: the stored entries now, a change checked before it is
stored, applied here before the answer, and announced (redacted) to whoever records changes.

A change is made on a copy of the stored entries (``Overlay``) and checked with the running file
exactly as a start would check it (unknown kind, missing credential, a model left without a
usable deployment, an alias to nothing): a refusal is a 400 naming the key, and nothing is
stored. A stored change is applied in this process before the answer and in every other
process within ``admin.upstreams_refresh_seconds`` (``liveconfig.live``).

``record_change`` is the one place a change is reported after it was stored: an audit entry
(``upstream.create``, ``upstream.price``, ...) with the entry's view before and after. Views never
hold a credential value (only its hint), so the audit log keeps them as they are.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from modelgate.admin.auth import Principal
from modelgate.admin.http import AdminError, bad_request
from modelgate.audit.actor import record
from modelgate.config import ConfigError, Settings
from modelgate.liveconfig.live import LiveRouting
from modelgate.liveconfig.overlay import Overlay, effective_settings
from modelgate.services import Services

log = logging.getLogger("modelgate.admin.upstreams")

#: Names the API gives providers and aliases: they travel in URL paths.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\[\]-]{0,127}$")

#: Called after a change was stored: (principal, action, target, before, after), views redacted.
ChangeListener = Callable[[Principal, str, str, dict[str, Any] | None, dict[str, Any] | None], None]


def checked_name(raw: str, what: str) -> str:
    if not NAME.match(raw):
        raise bad_request(
            f"{what}: 1 to 128 characters, letters, digits and . _ : [ ] -, starting with a letter or digit"
        )
    return raw


class UpstreamChanges:
    def __init__(self, services: Services) -> None:
        self.services = services
        #: Those told of every stored change (an audit log registers here).
        self.listeners: list[ChangeListener] = []

    @property
    def live(self) -> LiveRouting:
        live = self.services.live
        if live is None:  # pragma: no cover - Services.build always sets it
            raise AdminError(404, "not_found_error", "runtime upstream changes are not available here")
        return live

    def now(self) -> float:
        return self.services.clock.time()

    async def stored(self) -> Overlay:
        """The stored entries as they are in the database now (not only as applied here)."""
        live = self.live
        return live.open(await live.store.snapshot())

    def effective(self, overlay: Overlay | None = None) -> Settings:
        """The running file's settings with ``overlay`` (default: the applied one) over them."""
        live = self.live
        return effective_settings(self.services.settings, overlay or live.overlay, self.now())

    async def commit(self, candidate: Overlay, write: Callable[[], Awaitable[object]]) -> None:
        """Check ``candidate`` (400 naming the key when it cannot serve), then ``write`` it and
        apply it here."""
        live = self.live
        try:
            await live.check(candidate)
        except ConfigError as exc:
            raise bad_request(f"the change cannot be applied: {exc}") from None
        await write()
        try:
            await live.refresh(force=True)
        except ConfigError as exc:  # another change raced in between: every process logs it
            log.error("a stored upstream change is not applied: %s", exc)

    async def record_change(
        self,
        principal: Principal,
        action: str,
        target: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
    ) -> None:
        """After a change was stored: an audit entry (``upstream.<action>``, by the request's
        actor) and the listeners, with redacted views (hints, never a credential value; a
        provider's live health left out)."""
        log.info("upstream change by token %s: %s %s", principal.token_id, action, target)
        shown_before, shown_after = _audited(before), _audited(after)
        await record(
            self.services.audit,
            f"upstream.{action}",
            target,
            self.now(),
            before=shown_before,
            after=shown_after,
        )
        for listener in self.listeners:
            listener(principal, action, target, shown_before, shown_after)


def _audited(view: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if view is None else {k: v for k, v in view.items() if k != "health"}

"""Single sign-on in the metrics (docs/operations.md#metrics): sign-ins that succeeded, by role;
sign-ins refused, by reason; sessions refused, by reason; and the sessions alive now.

Exported while ``[sso]`` is configured. Counters are this process's (each worker counts its own;
Prometheus sums them). The live
sessions are database-wide, read once per scrape with a short timeout, like the other database
readings (``gateway.state_metrics``): every instance reports the same value, and a database that
does not answer in time leaves the last value read.

Labels are fixed words (a role, a reason below), never a person, an email or a provider's text.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Literal

from prometheus_client.core import Metric

from modelgate.clock import Clock
from modelgate.sso_config import SsoConfig
from modelgate.storage.base import StorageError
from modelgate.storage.people import PeopleStore, SessionRole
from modelgate.telemetry.hub import Telemetry
from modelgate.telemetry.metrics import gauge, labelled_counter

log = logging.getLogger("modelgate.admin.sso")

#: Why a sign-in did not end in a session.
SignInFailure = Literal[
    # starting it (GET /admin/api/sso/login)
    "invite_invalid",  # the invitation link is unknown, used or expired
    "too_many_pending",  # sso.max_pending_sign_ins sign-ins under way (429)
    # coming back (GET /admin/api/sso/callback)
    "malformed",  # a code, state or error that is too long or not printable ASCII
    "provider_refused",  # the provider sent the browser back with ``error``
    "missing_code",  # no code or no state
    "unknown_state",  # a state this gateway never issued, or one already used (a replayed callback)
    "other_browser",  # the state was issued to another browser (its cookie is missing or differs)
    "timed_out",  # back after sso.login_timeout_seconds
    "code_refused",  # the provider refused the code (used before, expired, wrong PKCE verifier)
    "invalid_id_token",  # the ID token's signature or claims (iss, aud, exp, nonce...) failed
    "unverified_email",  # the provider has not verified the person's email address
    "no_mapping",  # signed in, but no operator group, account rule, invitation or membership
    "provider_unavailable",  # the provider could not be reached or answered unusably
]
#: Why a request's session cookie was refused (401: sign in again).
SessionRefusal = Literal["unknown", "idle", "expired", "not_member", "invalid"]
#: Seconds a scrape waits for the count of live sessions.
DATABASE_TIMEOUT = 2.0


class SignInMetrics:
    def __init__(self, people: PeopleStore, clock: Clock, config: Callable[[], SsoConfig]) -> None:
        self.people = people
        self.clock = clock
        self.config = config
        self.signed_in: Counter[SessionRole] = Counter()
        self.failed: Counter[str] = Counter()
        self.sessions_refused: Counter[str] = Counter()
        self._active = 0

    def succeeded(self, role: SessionRole) -> None:
        self.signed_in[role] += 1

    def refused(self, reason: SignInFailure) -> None:
        self.failed[reason] += 1

    def session_refused(self, reason: SessionRefusal) -> None:
        self.sessions_refused[reason] += 1

    async def refresh(self) -> None:
        """Count the live sessions (before each scrape): not idle past ``session_idle_seconds`` and
        not past their absolute end."""
        config = self.config()
        if not config.enabled:
            return
        now = self.clock.time()
        idle_before = now - config.session_idle_seconds
        try:
            async with asyncio.timeout(DATABASE_TIMEOUT):
                self._active = await self.people.count_sessions(idle_before, now)
        except (StorageError, TimeoutError) as exc:
            log.warning("could not count the live sessions for the metrics: %s", type(exc).__name__)

    def collect(self) -> Iterable[Metric]:
        if not self.config().enabled and not (self.signed_in or self.failed or self.sessions_refused):
            return  # no [sso]: no series (they appear once a reload configures it)
        yield labelled_counter(
            "modelgate_sso_sign_ins",
            "Single sign-ons that started a session, by the role they got.",
            ("role",),
            {(role,): n for role, n in sorted(self.signed_in.items())},
        )
        yield labelled_counter(
            "modelgate_sso_sign_in_failures",
            "Single sign-ons refused, by reason (docs/operations.md lists them).",
            ("reason",),
            {(reason,): n for reason, n in sorted(self.failed.items())},
        )
        yield labelled_counter(
            "modelgate_admin_session_refusals",
            "Requests whose session cookie was refused (401), by reason: unknown, idle, expired, "
            "not_member (removed from the account), invalid.",
            ("reason",),
            {(reason,): n for reason, n in sorted(self.sessions_refused.items())},
        )
        yield gauge(
            "modelgate_admin_sessions_active",
            "Dashboard sessions alive now (database-wide: every instance reports the same).",
            self._active,
        )

    def install(self, telemetry: Telemetry) -> None:
        """Register with the metrics page (once per gateway: ``admin.api.admin_routes``)."""
        telemetry.metrics.collect_from(self.collect)
        telemetry.before_scrape.append(self.refresh)

"""Dashboard sessions made by a single sign-on (docs/people.md).

The cookie ``mg_session`` carries 256 random bits; the database holds only its HMAC digest under
the server secret, so a copy of the database opens no session. The cookie is ``HttpOnly``,
``SameSite=Lax``, scoped to ``/admin/api``, and ``Secure`` unless the gateway is reached over
loopback HTTP (``sso.redirect_url``). Every sign-in makes a new id (the one the browser held
before is deleted), so an id planted before the sign-in is worth nothing after it, and a session in
use gets a new id every ``sso.session_rotate_seconds`` (the old one works a few seconds more).

A session ends when unused for ``sso.session_idle_seconds`` or ``sso.session_max_seconds`` after
the sign-in, whichever comes first; ``last_seen_at`` is written at most once a minute (or a tenth
of the idle time), so authentication stays a read.

Writes made with the cookie (anything but GET and HEAD) must carry the session's CSRF token in
``x-csrf-token`` (the dashboard reads it from ``GET /admin/api/me``): a page on another site can
make the browser send the cookie, never read the token. A request a browser marks as cross-site
(``Sec-Fetch-Site: cross-site``) is refused outright.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Callable
from dataclasses import replace

from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin.http import AdminError, forbidden
from modelgate.admin.sign_in_metrics import SignInMetrics
from modelgate.clock import Clock
from modelgate.keys import Digester
from modelgate.sso_config import SsoConfig
from modelgate.storage.base import StorageError
from modelgate.storage.people import AdminSession, PeopleStore, Person, SessionRole

log = logging.getLogger("modelgate.admin.sso")

SESSION_COOKIE = "mg_session"
CSRF_HEADER = "x-csrf-token"
COOKIE_PATH = "/admin/api"
#: Cookie values longer than this are not looked up.
MAX_COOKIE_CHARS = 128
SAFE_METHODS = frozenset({"GET", "HEAD"})
#: Seconds a rotated-away session id still works (requests already sent with it).
ROTATION_GRACE_SECONDS = 30.0
_CHALLENGE = {"www-authenticate": 'Bearer realm="modelgate-admin"'}


def _unauthorized(message: str) -> AdminError:
    return AdminError(401, "authentication_error", message, _CHALLENGE)


def kind_digest(digester: Digester, kind: str, value: str) -> bytes:
    """The stored form of a secret of one kind (session, state, browser, invite): kinds never
    collide, so one kind's value cannot be replayed as another's."""
    return digester.digest(f"{kind}:{value}")


class Sessions:
    def __init__(
        self, store: PeopleStore, digester: Digester, clock: Clock, config: Callable[[], SsoConfig]
    ) -> None:
        self.store = store
        self.digester = digester
        self.clock = clock
        #: The running ``[sso]`` section, read at each use: a reload (SIGHUP) applies at once.
        self._config = config
        self.metrics = SignInMetrics(store, clock, config)

    @property
    def config(self) -> SsoConfig:
        return self._config()

    @property
    def touch_resolution(self) -> float:
        return min(60.0, self.config.session_idle_seconds / 10)

    def digest(self, kind: str, value: str) -> bytes:
        return kind_digest(self.digester, kind, value)

    def set_cookie(self, response: Response, name: str, value: str, path: str, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=path,
            secure=self.config.secure_cookies,
            httponly=True,
            samesite="lax",
        )

    def clear_cookie(self, response: Response, name: str, path: str) -> None:
        response.delete_cookie(
            name, path=path, secure=self.config.secure_cookies, httponly=True, samesite="lax"
        )

    async def start(
        self, request: Request, response: Response, person: Person, role: SessionRole, account_id: int | None
    ) -> None:
        """A new session for ``person`` (the browser's previous one, if any, is ended)."""
        previous = request.cookies.get(SESSION_COOKIE)
        if previous and len(previous) <= MAX_COOKIE_CHARS:
            await self.store.delete_session(self.digest("session", previous))
        value = secrets.token_urlsafe(32)
        now = self.clock.time()
        await self.store.create_session(
            self.digest("session", value),
            person.id,
            account_id,
            role,
            secrets.token_urlsafe(24),
            now,
            now + self.config.session_max_seconds,
        )
        self.set_cookie(response, SESSION_COOKIE, value, COOKIE_PATH, int(self.config.session_max_seconds))

    async def find(self, request: Request) -> AdminSession | None:
        """The live session the request's cookie names (None without a cookie); 401 for an unknown
        or ended one. Its id is not rotated here: ``rotate`` runs once the request has passed
        ``check_csrf``, so a refused request (whose answer sets no cookie) never ends the id the
        browser holds."""
        value = request.cookies.get(SESSION_COOKIE)
        if not value:
            return None
        if len(value) > MAX_COOKIE_CHARS:
            self.metrics.session_refused("invalid")
            raise _unauthorized("invalid session: sign in again")
        session = await self.store.find_session(self.digest("session", value))
        if session is None:
            self.metrics.session_refused("unknown")
            raise _unauthorized("no such session: sign in again")
        now = self.clock.time()
        expired = now >= session.expires_at
        if expired or now - session.last_seen_at >= self.config.session_idle_seconds:
            await self.store.delete_session(session.digest)
            self.metrics.session_refused("expired" if expired else "idle")
            raise _unauthorized("the session has ended: sign in again")
        if session.account_id is not None:
            # Membership is read on every request: a removed member is out, a new role applies now.
            member = await self.store.member(session.account_id, session.person.id)
            if member is None:
                await self.store.delete_session(session.digest)
                self.metrics.session_refused("not_member")
                raise _unauthorized("no longer a member of this account: sign in again")
            session = replace(session, role=member.role)
        if now - session.last_seen_at >= self.touch_resolution:
            try:
                await self.store.touch_session(session.digest, now)
            except StorageError as exc:  # bookkeeping only: the request goes on
                log.warning("could not record a session's use: %s", exc)
        return session

    async def rotate(self, session: AdminSession) -> str | None:
        """The new cookie value when the session's id was due for rotation (None otherwise)."""
        now = self.clock.time()
        renewed = None
        if now - session.created_at >= self.config.session_rotate_seconds:
            # A new id; the old one lives ROTATION_GRACE_SECONDS more for requests on their way (a
            # row ending that soon is never rotated again, so racing requests make one new id each).
            fresh = secrets.token_urlsafe(32)
            if await self.store.rotate_session(
                session.digest, self.digest("session", fresh), now, now + ROTATION_GRACE_SECONDS
            ):
                renewed = fresh
        return renewed

    def renew_cookie(self, response: Response, value: str, expires_at: float) -> None:
        if any(v.startswith(SESSION_COOKIE + "=") for v in response.headers.getlist("set-cookie")):
            return  # the handler set the session cookie itself (sign-out clears it)
        self.set_cookie(
            response, SESSION_COOKIE, value, COOKIE_PATH, max(1, int(expires_at - self.clock.time()))
        )

    @staticmethod
    def check_csrf(request: Request, session: AdminSession) -> None:
        if request.headers.get("sec-fetch-site", "").lower() == "cross-site":
            raise forbidden("cross-site requests are refused for signed-in sessions")
        if request.method in SAFE_METHODS:
            return
        sent = request.headers.get(CSRF_HEADER, "")
        if not sent or not hmac.compare_digest(sent.encode(), session.csrf.encode()):
            raise forbidden(
                f"a signed-in session's write needs the {CSRF_HEADER} header (csrf_token from GET /admin/api/sso/session)"
            )

    async def end(self, request: Request, response: Response, renewed: str | None = None) -> None:
        """Sign out: the session behind the cookie is deleted, and the id it was just rotated to
        (``renewed``) too; the cookie is cleared."""
        for value in (request.cookies.get(SESSION_COOKIE), renewed):
            if value and len(value) <= MAX_COOKIE_CHARS:
                await self.store.delete_session(self.digest("session", value))
        self.clear_cookie(response, SESSION_COOKIE, COOKIE_PATH)

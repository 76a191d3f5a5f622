"""Who is calling the admin API, and what they may see.

An admin token arrives as ``Authorization: Bearer``. Its format and checksum are checked first
(no lookup for garbage or typos), then its HMAC-SHA256 digest under the server secret is looked up;
the token itself is never stored, logged or compared in the clear. Looking up a keyed digest reveals
nothing about other tokens through timing; the stored digest is then compared in constant time
(``hmac.compare_digest``), as is the checksum.

Scope comes from the stored token row: ``account_id`` None is an operator, otherwise the token sees
one account. The token's prefix (``mg-op-`` / ``mg-acct-``) must agree with that row, so a token can
never be read as wider than it was issued.

Lifecycle: the row is read on every admin request (no cache), so a revoked or expired token is
refused by every instance from the next request on, whichever process revoked it. ``last_used_at``
is written at most once per ``admin.token_last_used_resolution_seconds`` per token (a conditional
update, so racing instances write once); a failed write never fails the request.

A person signed in with single sign-on (``admin.sso``) is authenticated by the session cookie
instead (``admin.sessions``: CSRF token on writes); an ``Authorization`` header always wins, so
automation with admin tokens works as before.

Visibility rule: anything outside the caller's account is reported exactly like something that does
not exist (same 404, same message form), so an account token cannot learn whether another
account's ids exist.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass

from starlette.requests import Request

from modelgate.admin.http import AdminError, forbidden, not_found
from modelgate.admin.sessions import Sessions
from modelgate.clock import Clock
from modelgate.keys import ACCOUNT_TOKEN_PREFIX, OPERATOR_TOKEN_PREFIX, Digester, is_well_formed_admin_token
from modelgate.storage.base import AdminTokenStore, StorageError
from modelgate.storage.people import AdminSession, Person, SessionRole

log = logging.getLogger("modelgate.admin")

_CHALLENGE = {"www-authenticate": 'Bearer realm="modelgate-admin"'}


def _unauthorized(message: str) -> AdminError:
    return AdminError(401, "authentication_error", message, _CHALLENGE)


@dataclass(frozen=True, slots=True)
class Principal:
    token_id: str
    #: None: operator (every account); otherwise the only account this caller can see.
    account_id: int | None
    #: The person signed in to a dashboard session (None: an admin token).
    person: Person | None = None
    #: A session's role: ``operator``, ``owner`` or ``member`` (None: an admin token, whose
    #: scope alone says what it may do; an account token acts as an owner).
    session_role: SessionRole | None = None
    #: The signed-in session itself (None: an admin token).
    session: AdminSession | None = None
    #: The session's new id when it was rotated by this request: the answer sets it as the cookie.
    renewed_session: str | None = None

    @property
    def is_operator(self) -> bool:
        return self.account_id is None

    @property
    def is_member(self) -> bool:
        """A member (not an owner) of the account: manages only the keys they created."""
        return self.session_role == "member"

    @property
    def actor(self) -> str:
        """Who acts, as the audit log names them: the person (name and email) or the token id."""
        person = self.person
        if person is None:
            return self.token_id
        if person.name and person.email:
            return f"{person.name} <{person.email}>"
        return person.email or person.name or person.id

    def require_owner(self) -> None:
        """Owners (and account tokens, and operators) only: members are refused."""
        if self.is_member:
            raise forbidden("this operation needs an owner of the account")

    def require_operator(self) -> None:
        if not self.is_operator:
            raise forbidden("this operation needs an operator admin token")

    def check_account(self, account_id: int) -> None:
        """404 (as if missing) for an account this caller cannot see."""
        if self.account_id is not None and self.account_id != account_id:
            raise not_found("account", account_id)


def bearer_token(request: Request) -> str:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    token = value.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthorized("missing admin token: send it as Authorization: Bearer mg-op-… or mg-acct-…")
    return token


async def authenticate(
    request: Request,
    store: AdminTokenStore,
    digester: Digester,
    clock: Clock,
    touch_resolution: float,
    sessions: Sessions | None = None,
) -> Principal:
    """The admin token in ``Authorization`` or, without one, the signed-in session's cookie."""
    if sessions is not None and "authorization" not in request.headers:
        session = await sessions.find(request)
        if session is not None:
            # Checked before the id rotates: a refused request's answer carries no new cookie.
            sessions.check_csrf(request, session)
            renewed = await sessions.rotate(session)
            return Principal(
                token_id=f"person:{session.person.id}",
                account_id=session.account_id,
                person=session.person,
                session_role=session.role,
                session=session,
                renewed_session=renewed,
            )
    token = bearer_token(request)
    if not is_well_formed_admin_token(token):
        raise _unauthorized("invalid admin token: not a well-formed mg-op-/mg-acct- token")
    digest = digester.digest(token)
    row = await store.find_admin_token(digest)
    if row is None or not hmac.compare_digest(row.digest, digest):
        raise _unauthorized("invalid admin token")
    operator_prefix = token.startswith(OPERATOR_TOKEN_PREFIX)
    if operator_prefix != (row.account_id is None) or (
        not operator_prefix and not token.startswith(ACCOUNT_TOKEN_PREFIX)
    ):
        raise _unauthorized("invalid admin token")
    # The caller holds this token's secret, so saying why it stopped working tells them nothing new.
    now = clock.time()
    if row.revoked_at is not None:
        raise _unauthorized("this admin token has been revoked")
    if row.expires_at is not None and now >= row.expires_at:
        raise _unauthorized("this admin token has expired")
    if row.last_used_at is None or now - row.last_used_at >= touch_resolution:
        try:
            await store.touch_admin_token(row.id, now, touch_resolution)
        except StorageError as exc:  # bookkeeping only: the request goes on
            log.warning("could not record the last use of admin token %s: %s", row.id, exc)
    return Principal(token_id=row.id, account_id=row.account_id)

"""Single sign-on for the dashboard and admin API with OpenID Connect (docs/people.md).

``GET /admin/api/sso/login`` starts a sign-in: a fresh ``state``, ``nonce`` and PKCE verifier are
kept server-side (the state only as a digest, bound to a cookie of the browser that started it)
and the browser goes to the provider. ``GET /admin/api/sso/callback`` takes the state exactly once
(a replayed or forged callback finds nothing), checks the browser binding and the sign-in's age,
exchanges the code (``admin.oidc`` verifies the ID token), records the person by (issuer,
subject), decides their role, and starts a session (``admin.sessions``).

The role, in order: an operator when the groups claim names one of ``sso.operator_groups``; the
account and role of the first ``sso.accounts`` rule whose group the person has; the account of the
invitation the sign-in carries; the first account the person is a member of. Nobody else is let in
(403): a sign-in proves who someone is, never that they may manage anything.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from modelgate.admin.auth import Principal
from modelgate.admin.context import AdminContext
from modelgate.admin.http import AdminError, ErrorType, bad_request, forbidden, json_response, not_found
from modelgate.admin.oidc import Identity, OidcError, RelyingParty
from modelgate.admin.sessions import Sessions
from modelgate.admin.sign_in_metrics import SignInFailure
from modelgate.audit.actor import Actor, acting, draft
from modelgate.config import ConfigError
from modelgate.keys import random_base62
from modelgate.sso_config import SsoConfig, client_secret
from modelgate.storage.audit import Subject
from modelgate.storage.people import Invite, Person, SessionRole

log = logging.getLogger("modelgate.admin.sso")

LOGIN_COOKIE = "mg_sso_login"
LOGIN_PATH = "/admin/api/sso"
INVITE_PREFIX = "mg-inv-"
#: Longest ``code``, ``state`` or invitation token a callback or sign-in link may carry (some
#: providers issue codes over a thousand characters long).
MAX_PARAM_CHARS = 4096
AFTER_SIGN_IN = "/dashboard"


def _param(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if len(value) > MAX_PARAM_CHARS or not value.isascii() or not value.isprintable():
        raise bad_request(f"{name}: not a value this gateway issued or accepts")
    return value


def _joined(invite: Invite) -> Subject:
    """A person joining with an invitation (``member.join``): the role it gave, and which one."""
    return Subject(f"person:{invite.used_by}", invite.account_id, {"role": invite.role, "invite": invite.id})


def _oidc_error(exc: OidcError) -> AdminError:
    kind: dict[int, ErrorType] = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
    }
    return AdminError(exc.status, kind.get(exc.status, "upstream_error"), exc.message)


class SsoEndpoints:
    def __init__(self, context: AdminContext, sessions: Sessions) -> None:
        self.context = context
        self.sessions = sessions
        self.metrics = sessions.metrics
        self.people = context.services.people
        self._relying_party: tuple[SsoConfig, RelyingParty] | None = None
        _ = self.relying_party  # the client secret is checked at start (ConfigError)

    @property
    def config(self) -> SsoConfig:
        """The running ``[sso]`` section: a reload (SIGHUP) applies to the next sign-in."""
        return self.context.settings.sso

    @property
    def relying_party(self) -> RelyingParty:
        """The relying party of the running ``[sso]`` section, made anew when a reload changed it
        (the provider's discovery and keys are then read again)."""
        config = self.config
        if self._relying_party is None or self._relying_party[0] != config:
            try:
                secret = client_secret(config, os.environ)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            self._relying_party = (config, RelyingParty(config, secret, self.context.clock))
        return self._relying_party[1]

    def _refused(self, reason: SignInFailure, error: AdminError) -> AdminError:
        self.metrics.refused(reason)
        return error

    def _require_enabled(self) -> None:
        if not self.config.enabled:
            raise AdminError(404, "not_found_error", "single sign-on is not configured (sso.issuer)")

    async def status(self, request: Request) -> Response:
        """Public: whether the dashboard should offer a sign-in button."""
        enabled = self.config.enabled
        return json_response({"enabled": enabled, "login_url": f"{LOGIN_PATH}/login" if enabled else None})

    async def login(self, request: Request) -> Response:
        self._require_enabled()
        invite = _param(request, "invite")
        invite_digest = None
        now = self.context.now()
        if invite is not None:
            invite_digest = self.sessions.digest("invite", invite)
            found = await self.people.find_invite(invite_digest) if invite.startswith(INVITE_PREFIX) else None
            if found is None or found.used_at is not None or found.expires_at <= now:
                raise self._refused(
                    "invite_invalid", bad_request("invite: this invitation is unknown, used or expired")
                )
        try:
            auth = await self.relying_party.authorization_request()
        except OidcError as exc:
            raise self._refused(exc.reason, _oidc_error(exc)) from None
        browser = secrets.token_urlsafe(32)
        await self.people.prune_logins(now - self.config.login_timeout_seconds)
        await self.people.prune_sessions(now - self.config.session_idle_seconds, now)
        # Starting a sign-in needs no credential, so the rows it leaves are bounded.
        if await self.people.count_logins() >= self.config.max_pending_sign_ins:
            raise self._refused(
                "too_many_pending",
                AdminError(
                    429,
                    "rate_limit_error",
                    "too many sign-ins under way: try again in a minute",
                    {"retry-after": "60"},
                ),
            )
        await self.people.save_login(
            self.sessions.digest("state", auth.state),
            self.sessions.digest("browser", browser),
            auth.verifier,
            auth.nonce,
            invite_digest,
            now,
        )
        response = RedirectResponse(auth.url, status_code=302, headers={"cache-control": "no-store"})
        self.sessions.set_cookie(
            response, LOGIN_COOKIE, browser, LOGIN_PATH, int(self.config.login_timeout_seconds)
        )
        return response

    async def callback(self, request: Request) -> Response:
        self._require_enabled()
        try:
            error, state, code = (_param(request, name) for name in ("error", "state", "code"))
        except AdminError as exc:
            raise self._refused("malformed", exc) from None
        if error is not None:
            raise self._refused(
                "provider_refused",
                AdminError(
                    401, "authentication_error", f"the sign-in provider refused the sign-in: {error[:80]}"
                ),
            )
        if state is None or code is None:
            raise self._refused("missing_code", bad_request("a sign-in callback needs code and state"))
        pending = await self.people.take_login(self.sessions.digest("state", state))
        if pending is None:
            raise self._refused(
                "unknown_state", bad_request("state: unknown or already used: start the sign-in again")
            )
        browser = request.cookies.get(LOGIN_COOKIE, "")
        if (
            not browser
            or len(browser) > MAX_PARAM_CHARS
            or not hmac.compare_digest(self.sessions.digest("browser", browser), pending.browser_digest)
        ):
            raise self._refused(
                "other_browser", bad_request("this sign-in was started in another browser: start it again")
            )
        now = self.context.now()
        if now - pending.created_at > self.config.login_timeout_seconds:
            raise self._refused("timed_out", bad_request("this sign-in took too long: start it again"))
        try:
            identity = await self.relying_party.exchange(code, pending.verifier, pending.nonce)
        except OidcError as exc:
            raise self._refused(exc.reason, _oidc_error(exc)) from None
        person = await self.people.upsert_person(
            "person_" + random_base62(16),
            identity.issuer,
            identity.subject,
            identity.email,
            identity.name,
            now,
        )
        role, account_id = await self._role(identity, person, pending.invite_digest, now)
        response = RedirectResponse(AFTER_SIGN_IN, status_code=303, headers={"cache-control": "no-store"})
        await self.sessions.start(request, response, person, role, account_id)
        self.sessions.clear_cookie(response, LOGIN_COOKIE, LOGIN_PATH)
        self.metrics.succeeded(role)
        log.info("%s signed in as %s (account %s)", person.id, role, account_id)
        return response

    async def _role(
        self, identity: Identity, person: Person, invite_digest: bytes | None, now: float
    ) -> tuple[SessionRole, int | None]:
        invited = None
        if invite_digest is not None:
            # The person joins by their own hand: they are the actor of the entry, written in the
            # same transaction as the membership (no crash leaves an unaudited member).
            with acting(Actor(Principal(f"person:{person.id}", None, person).actor)):
                joined = draft("member.join", _joined, now)
            invited = await self.people.use_invite(invite_digest, person.id, now, audit=joined)
            if invited is None:
                raise self._refused(
                    "invite_invalid", bad_request("invite: this invitation is unknown, used or expired")
                )
        groups = set(identity.groups)
        if groups & set(self.config.operator_groups):
            return "operator", None
        if invited is not None:
            return invited.role, invited.account_id
        for rule in self.config.accounts:
            if rule.group in groups and await self.context.accounts.get_account(rule.account_id) is not None:
                member = await self.people.member(rule.account_id, person.id)
                if member is None:
                    member = await self.people.put_member(rule.account_id, person.id, rule.role, now)
                return member.role, rule.account_id
        memberships = await self.people.memberships(person.id)
        if memberships:
            return memberships[0].role, memberships[0].account_id
        raise self._refused(
            "no_mapping",
            forbidden(
                "signed in, but no role here: ask an operator to map one of your groups (sso.accounts, "
                "sso.operator_groups) or an account owner to invite you"
            ),
        )

    async def session(self, request: Request, principal: Principal) -> Response:
        """The signed-in person, their role and the CSRF token their writes must carry."""
        found = principal.session
        if found is None:
            raise not_found("session", "(this caller is an admin token)")
        person = found.person
        return json_response(
            {
                "person": {"id": person.id, "email": person.email, "name": person.name},
                "role": found.role,
                "account_id": found.account_id,
                "csrf_token": found.csrf,
                "expires_at": int(found.expires_at),
            }
        )

    async def logout(self, request: Request, principal: Principal) -> Response:
        if principal.person is None:
            raise bad_request("only a signed-in session can sign out (admin tokens are revoked instead)")
        response = json_response({"signed_out": True})
        await self.sessions.end(request, response, principal.renewed_session)
        return response

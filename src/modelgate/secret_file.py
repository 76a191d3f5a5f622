"""The HMAC secret every key and admin token digest is made with, and the check that the database
and the secret belong together.

The secret is ``secret`` in the configuration, or the file ``<data_dir>/secret``, generated once
(mode 0600) on a first start. Keys and admin tokens are stored only as HMAC digests under it, so a
gateway started with another secret refuses every one of them with 401. To make that a refusal
to start instead, the database records a fingerprint of its secret (an HMAC of a fixed label
under the secret: it tells secrets apart and reveals nothing of them) and ``checked_secret``
compares it at every start and CLI command:

- the file is missing while the database holds keys or admin tokens, or has a fingerprint: the
  start stops, naming the file and what to do (restore it; or ``--rotate-secret``);
- the secret's fingerprint differs from the recorded one: the same;
- the file is empty, unreadable or too short: the same kind of message, never a traceback;
- ``--rotate-secret`` (``modelgate serve``) accepts the current secret (generating the file if it
  is missing) and records its fingerprint: every existing key and admin token then stops
  working, and new ones must be issued (``modelgate tokens create``, ``modelgate keys create``);
- a database without a fingerprint (made before this check, or empty) records the current one.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from modelgate.config import ConfigError, Settings
from modelgate.storage.base import AdminTokenStore

log = logging.getLogger("modelgate")

#: Bytes of the shortest secret accepted (``keys.Digester`` checks the same).
MIN_SECRET_BYTES = 32
_LABEL = b"modelgate secret fingerprint v1"
ROTATE_FLAG = "--rotate-secret"


class SecretMismatch(ConfigError):
    """The secret does not belong to the database; the message says what to do."""


def secret_path(settings: Settings) -> Path:
    return Path(settings.data_dir) / "secret"


def fingerprint(secret: bytes) -> str:
    return hmac.new(secret, _LABEL, hashlib.sha256).hexdigest()[:32]


def _where(settings: Settings) -> str:
    return "the configured `secret`" if settings.secret else str(secret_path(settings))


def read_secret(settings: Settings) -> bytes | None:
    """The configured secret or the file's; None when the file does not exist. ConfigError for a
    secret that cannot be used (empty, too short, unreadable)."""
    if settings.secret:
        if len(settings.secret) < MIN_SECRET_BYTES:
            raise ConfigError(f"secret: must be at least {MIN_SECRET_BYTES} characters")
        return settings.secret.encode()
    path = secret_path(settings)
    try:
        value = path.read_text("utf-8").strip().encode()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the secret file {path} cannot be read: {exc}") from exc
    if len(value) < MIN_SECRET_BYTES:
        state = "is empty" if not value else f"holds {len(value)} bytes, fewer than {MIN_SECRET_BYTES}"
        raise ConfigError(
            f"the secret file {path} {state}. Restore it from a backup; if the database holds no "
            f"keys yet, delete it and a new one is generated (docs/operations.md#the-secret-file)"
        )
    return value


def generate_secret(path: Path) -> bytes:
    """A new secret in a new file only its owner can read (never overwriting one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    value = secrets.token_urlsafe(48)
    with os.fdopen(fd, "w") as handle:
        handle.write(value)
    return value.encode()


def load_secret(settings: Settings) -> bytes:
    """The secret, generating the file when it does not exist (use ``checked_secret`` wherever a
    database is at hand: it refuses a secret that does not belong to it)."""
    value = read_secret(settings)
    return value if value is not None else generate_secret(secret_path(settings))


def _what_to_do(settings: Settings) -> str:
    restore = (
        "set `secret` back to the value the keys were made with"
        if settings.secret
        else f"restore {secret_path(settings)} from a backup (the same content)"
    )
    return (
        f"{restore}; or, to give up every existing key and admin token, start once with "
        f"`modelgate serve {ROTATE_FLAG}` and issue new ones (`modelgate tokens create`, "
        "`modelgate keys create`). docs/operations.md#the-secret-file"
    )


async def checked_secret(
    store: AdminTokenStore, settings: Settings, now: float, *, rotate: bool = False
) -> bytes:
    """The secret, after checking it belongs to ``store`` (the module docstring); SecretMismatch
    or ConfigError with an operator's message otherwise. Generates the file only when allowed."""
    value = read_secret(settings)
    recorded = await store.secret_fingerprint()
    generated = value is None
    if value is None:
        path = secret_path(settings)
        if not rotate and (recorded is not None or await store.holds_credentials()):
            raise SecretMismatch(
                f"the secret file {path} is missing, but the database holds keys and admin tokens "
                f"made with it: with a new secret every one of them would be refused. {_what_to_do(settings)}"
            )
        value = generate_secret(path)
        log.warning("generated a new secret in %s", path)
    current = fingerprint(value)
    if recorded == current:
        return value
    if recorded is not None and not rotate:
        raise SecretMismatch(
            f"{_where(settings)} is not the secret this database's keys and admin tokens were made "
            f"with (fingerprint {current[:12]}, the database recorded {recorded[:12]}): every one "
            f"would be refused. {_what_to_do(settings)}"
        )
    if recorded is not None:
        log.warning(
            "%s: the secret was rotated; every key and admin token made before no longer works",
            ROTATE_FLAG,
        )
    elif not generated and not settings.secret and not await store.holds_credentials():
        # A secret from an earlier start and a database that never recorded it: a new database,
        # perhaps in place of one that was deleted (said once: the fingerprint is recorded now).
        log.warning(
            "the database %s is new but the secret file %s is from an earlier start: if it replaced a "
            "database that held data, stop the gateway and restore that one (docs/operations.md#the-database-file)",
            settings.resolved_database_url,
            secret_path(settings),
        )
    await store.record_secret_fingerprint(current, now)
    return value

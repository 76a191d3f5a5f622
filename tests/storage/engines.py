"""Where the tests find PostgreSQL and Redis, and throwaway databases on them.

``scripts/services.sh`` (run by ``make test``) starts both and exports
``MODELGATE_TEST_DATABASE_URL`` and ``MODELGATE_TEST_REDIS_URL``. Without them a test that needs
one is skipped on a developer's machine, but fails in CI (``CI=true``): a green CI run must have
run them.

Several pytest-xdist workers share the one server of each: every PostgreSQL test makes databases
of its own (``fresh_database``, random names), and each worker gets a Redis database number of
its own (``redis_url``), so no worker sees another's rate windows or keys. Redis publish/subscribe
channels are not per database: a gateway may hear another worker's key-change announcements,
which cost it a key refresh and nothing else.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tests.ports import xdist_worker

DATABASE_ENV = "MODELGATE_TEST_DATABASE_URL"
REDIS_ENV = "MODELGATE_TEST_REDIS_URL"
REDIS_SERVER_ENV = "MODELGATE_TEST_REDIS_SERVER"


def required_service(env: str, what: str) -> str:
    value = os.environ.get(env, "").strip()
    if value:
        return value
    message = (
        f"{env} is not set: this test needs {what}. `make test` (scripts/services.sh) starts one "
        f"and sets it; or point {env} at one yourself."
    )
    if os.environ.get("CI", "").lower() in {"true", "1", "yes"}:
        pytest.fail(message + " In CI these tests must run, not skip.", pytrace=False)
    pytest.skip(message)


def database_url() -> str:
    return required_service(DATABASE_ENV, "PostgreSQL")


def redis_url() -> str:
    """The test Redis, at this xdist worker's own database number (1 + its index; the URL's own
    number when not under xdist)."""
    url = required_service(REDIS_ENV, "Redis")
    if not os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
        return url
    index, _ = xdist_worker()
    return _with_database(url, str(1 + index))


def redis_server_binary() -> str:
    redis_url()
    return required_service(REDIS_SERVER_ENV, "the redis-server binary (to stop and restart a Redis)")


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def create_database(prefix: str = "mgtest") -> str:
    """The URL of a new, empty PostgreSQL database on the test server."""
    admin_url = database_url()
    name = f"{prefix}_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return _with_database(admin_url, name)


async def drop_database(url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    admin = await asyncpg.connect(database_url())
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@asynccontextmanager
async def fresh_database(prefix: str = "mgtest") -> AsyncIterator[str]:
    """A new, empty PostgreSQL database, dropped afterwards."""
    url = await create_database(prefix)
    try:
        yield url
    finally:
        await drop_database(url)

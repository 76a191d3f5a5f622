"""docs/scale-out.md's local PostgreSQL and Redis recipe for a bare Debian machine works (issue #35
item 10): its SQL, run as the PostgreSQL superuser, makes a role and database the gateway migrates
and serves from with the recipe's URL; with the recipe's Redis URL form, /health answers exactly as
the recipe's last line says. The apt-get and service lines cannot run here (no root, no network);
they are checked for the packages and services the rest relies on. Runs with scripts/test.sh (a
throwaway PostgreSQL and Redis)."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx

from tests.gateway_server import running_gateway
from tests.storage.engines import database_url, redis_url

ROOT = Path(__file__).resolve().parents[2]
HEADING = "### On one Debian machine: a local PostgreSQL and Redis"


def recipe() -> str:
    text = (ROOT / "docs" / "scale-out.md").read_text("utf-8")
    section = text[text.index(HEADING) :]
    start = section.index("```sh\n") + len("```sh\n")
    return section[start : section.index("```", start)]


def test_the_recipe_names_what_it_needs() -> None:
    block = recipe()
    assert "sudo apt-get install -y postgresql redis-server" in block
    assert "sudo service postgresql start && sudo service redis-server start" in block
    assert re.search(r"^export MODELGATE_SECRET=.*head -c 48 /dev/urandom", block, re.M)


def test_the_recipe_runs_against_a_real_postgresql_and_redis(tmp_path: Path) -> None:
    server = database_url()
    redis = redis_url()
    block = recipe()
    # The role and database get names of their own, so the test server may hold other runs'.
    name = f"mg_recipe_{secrets.token_hex(4)}"
    statements = [sql.replace("modelgate", name) for sql in re.findall(r'-c "([^"]+)"', block)]
    assert len(statements) == 2 and statements[0].startswith("CREATE ROLE")
    documented = re.search(r"^export MODELGATE_DATABASE_URL=(\S+)", block, re.M)
    assert documented is not None
    parts = urlsplit(documented.group(1).replace("modelgate", name))
    assert parts.hostname == "127.0.0.1" and parts.port == 5432
    test_server = urlsplit(server)
    url = parts._replace(
        netloc=f"{parts.username}:{parts.password}@{test_server.hostname}:{test_server.port}"
    ).geturl()
    documented_redis = re.search(r"^export MODELGATE_REDIS_URL=(\S+)", block, re.M)
    assert documented_redis is not None and documented_redis.group(1) == "redis://127.0.0.1:6379/0"
    expected = json.loads(re.search(r"/health\s+# (\{.*\})$", block, re.M).group(1))  # type: ignore[union-attr]

    async def run_sql(sql: list[str]) -> None:
        admin = await asyncpg.connect(server)
        try:
            for statement in sql:
                await admin.execute(statement)
        finally:
            await admin.close()

    asyncio.run(run_sql(statements))
    try:
        with running_gateway(tmp_path / "data", database_url=url, redis_url=redis) as gateway:
            assert httpx.get(f"{gateway.base_url}/health").json() == expected
            key = gateway.key(gateway.account("recipe"), "Basic").secret
            answer = httpx.post(
                f"{gateway.base_url}/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                json={"model": "aria-haiku-4.5", "messages": [{"role": "user", "content": "Hello"}]},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
    finally:
        asyncio.run(
            run_sql(
                [
                    f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'",
                    f"DROP DATABASE IF EXISTS {name}",
                    f"DROP ROLE IF EXISTS {name}",
                ]
            )
        )

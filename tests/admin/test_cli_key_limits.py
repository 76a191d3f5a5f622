"""``keys create`` and ``keys update`` with ``--tpm`` and ``--concurrency``, run as real
subprocesses against the database of a running gateway, which follows; hostile values fail with
the flag named and change nothing."""

from __future__ import annotations

from tests.admin.test_cli import SECRET, as_json, chat, cli_gateway, modelgate, server_follows
from tests.gateway_server import GatewayServer

__all__ = ["SECRET", "cli_gateway"]  # the module's gateway fixture, shared


def test_create_and_update_token_and_concurrency_limits(cli_gateway: GatewayServer) -> None:
    cli_gateway.account("cli-limits")
    row = as_json(
        modelgate(
            cli_gateway, "keys", "create", "--account", "cli-limits", "--group", "Pro", "--tpm", "1",
            "--concurrency", "3", "--json",
        )
    )  # fmt: skip
    assert row["tpm"] == 1 and row["concurrency"] == 3
    key_id, secret = row["id"], row["secret"]
    server_follows(cli_gateway, key_id)
    assert chat(cli_gateway, secret) == 429  # no request fits in 1 token per minute

    updated = as_json(modelgate(cli_gateway, "keys", "update", key_id, "--tpm", "none", "--json"))
    assert updated["tpm"] == "none" and updated["concurrency"] == 3
    server_follows(cli_gateway, key_id)
    assert chat(cli_gateway, secret) == 200

    for flag, value in (("--tpm", "-5"), ("--tpm", "abc"), ("--concurrency", "0"), ("--tpm", "5h=abc")):
        failed = modelgate(cli_gateway, "keys", "update", key_id, flag, value, ok=False)
        assert flag.removeprefix("--") in failed.stderr
    huge = modelgate(cli_gateway, "keys", "update", key_id, "--concurrency", str(2**40), ok=False)
    assert "max_concurrency" in huge.stderr
    create_bad = modelgate(
        cli_gateway, "keys", "create", "--account", "cli-limits", "--group", "Pro", "--tpm", "none", ok=False
    )
    assert "tpm" in create_bad.stderr
    record = cli_gateway.call(cli_gateway.services.key_records.get_key(key_id))
    assert record is not None and record.tpm is None and record.max_concurrency == 3

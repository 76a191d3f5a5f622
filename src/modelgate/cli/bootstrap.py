"""First start and the start banner of ``modelgate serve``.

On an empty database the first start issues an operator admin token and a ``demo`` account with
one key per group. Those secrets are printed once, or, with ``--bootstrap-file PATH``, written to a
new file of mode 0600 and printed nowhere (service managers keep stdout in their logs). Every
start prints where the gateway and its dashboard are and how to get a new key or admin token;
"served by the built-in simulator" is said only of models the simulator really serves.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from modelgate.config import Settings
from modelgate.management import Management
from modelgate.storage.base import GROUPS, Group

DEMO_ACCOUNT = "demo"
DEMO_CREDITS_UC = 100 * 1_000_000
#: Names in the bootstrap file: a shell reads it with ``. PATH``.
TOKEN_VARIABLE = "MODELGATE_ADMIN_TOKEN"  # noqa: S105 - a variable name


def key_variable(group: Group) -> str:
    return f"MODELGATE_DEMO_{group.upper()}_KEY"


@dataclass(frozen=True, slots=True)
class FirstStart:
    admin_token: str
    keys: dict[Group, str]


async def first_start(m: Management) -> FirstStart | None:
    """On an empty database: an operator admin token and a demo account with one key per group."""
    if await m.tokens.count_admin_tokens() or await m.accounts.list_accounts():
        return None
    token = await m.issue_admin_token(None, name="first start")
    account = await m.create_account(DEMO_ACCOUNT, DEMO_CREDITS_UC)
    keys = {
        group: (await m.create_key(account, group, name=f"demo-{group.lower()}")).secret for group in GROUPS
    }
    return FirstStart(token.secret, keys)


class BootstrapFileError(Exception):
    """The bootstrap file cannot be created; nothing was bootstrapped."""


def create_secrets_file(path: Path) -> int:
    """A new file only its owner can read (``O_EXCL``: an existing file is never overwritten)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise BootstrapFileError(
            f"--bootstrap-file: {path} exists; first-start secrets go to a new file only"
        ) from None
    except OSError as exc:
        raise BootstrapFileError(f"--bootstrap-file: cannot create {path}: {exc.strerror}") from None
    os.fchmod(fd, 0o600)  # whatever the umask did
    return fd


def _discard(fd: int, path: Path) -> None:
    os.close(fd)
    os.unlink(path)


async def first_start_to_file(m: Management, path: Path, url: str) -> FirstStart | None:
    """``first_start`` with its secrets written to ``path``, a new file created before any secret
    exists: a path that cannot be created leaves the database empty."""
    if await m.tokens.count_admin_tokens() or await m.accounts.list_accounts():
        return None
    fd = create_secrets_file(path)
    try:
        first = await first_start(m)
    except BaseException:
        _discard(fd, path)
        raise
    if first is None:  # another process bootstrapped in between
        _discard(fd, path)
        return None
    write_secrets(fd, first, url)
    return first


def write_secrets(fd: int, first: FirstStart, base_url: str) -> None:
    lines = [
        "# modelgate first-start secrets; shown nowhere else. Read them into a shell with: . THIS_FILE",
        f"# Dashboard: {base_url}/dashboard (sign in with the admin token)",
        f"{TOKEN_VARIABLE}={first.admin_token}",
        *(f"{key_variable(group)}={secret}" for group, secret in first.keys.items()),
    ]
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def _sourceable(path: Path) -> str:
    """POSIX ``.`` looks a bare name up in PATH, not in the current directory."""
    text = str(path)
    return text if "/" in text else f"./{text}"


def base_url(settings: Settings) -> str:
    host = settings.server.host
    # Listening on every interface: show the loopback address, which works on this machine.
    wildcard = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}  # noqa: S104
    shown = wildcard.get(host, host)
    return f"http://{f'[{shown}]' if ':' in shown else shown}:{settings.server.port}"


def simulated_models(settings: Settings, deployments: Mapping[str, Sequence[str]]) -> list[str]:
    """Models whose every deployment is on a ``simulator`` provider (``deployments``: model ->
    provider names)."""
    kinds = {p.name: p.kind for p in settings.providers}
    return [
        m
        for m, providers in deployments.items()
        if providers and all(kinds[p] == "simulator" for p in providers)
    ]


def _try_it(url: str, model: str, key: str, simulated: bool) -> str:
    served = f"{model}, served by the built-in simulator, not a real model" if simulated else model
    return (
        f"Try it ({served}):\n"
        f'  curl -s {url}/v1/messages -H "x-api-key: {key}" \\\n'
        "    -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' \\\n"
        f'    -d \'{{"model":"{model}","max_tokens":64,"messages":[{{"role":"user","content":"Hello"}}]}}\'\n'
    )


def banner(
    settings: Settings,
    deployments: Mapping[str, Sequence[str]],
    *,
    first: FirstStart | None,
    bootstrap_file: Path | None,
) -> str:
    url = base_url(settings)
    simulated = simulated_models(settings, deployments)
    aria = [m for m in deployments if m.startswith("aria-")]
    example = "aria-sonnet-4.6" if "aria-sonnet-4.6" in deployments else (aria[0] if aria else "")
    out = [f"modelgate on {url}  (dashboard: {url}/dashboard, sign in with an admin token)"]
    if first is not None and bootstrap_file is None:
        out += [
            "",
            "First start: these secrets are shown ONCE; store them now (--bootstrap-file PATH writes them",
            "to a file instead):",
            f"  operator admin token : {first.admin_token}",
            f"  demo account         : {DEMO_ACCOUNT} ({DEMO_CREDITS_UC // 1_000_000} credits)",
            *(f"  {group + ' key':<21}: {secret}" for group, secret in first.keys.items()),
            "",
        ]
        if example:
            out.append(_try_it(url, example, first.keys["Basic"], example in simulated))
    elif first is not None and bootstrap_file is not None:
        out += [
            f"First start: the operator admin token and the demo account's three keys were written to {bootstrap_file}",
            "(mode 0600) and are shown nowhere else. Read them into a shell with:",
            f"  . {_sourceable(bootstrap_file)}",
            "",
        ]
        if example:
            out.append(_try_it(url, example, f"${key_variable('Basic')}", example in simulated))
    else:
        if bootstrap_file is not None:
            out.append(f"Not a first start: nothing was written to {bootstrap_file}.")
        cli = cli_command()
        out.append(
            f"New key: {cli} keys create --account NAME --group Basic|Pro|Nova;"
            f" new admin token: {cli} tokens create [--account NAME]"
        )
    if simulated:
        which = "every model" if len(simulated) == len(deployments) else ", ".join(simulated)
        out.append(f"The built-in simulator (not a real model) serves {which}.")
    return "\n".join(out)


def cli_command() -> str:
    """How a shell calls this CLI: ``modelgate`` when that name on PATH is this very program, else
    the path it was started by (``.venv/bin/modelgate`` after ``make serve``, which puts nothing
    on PATH) or ``<python> -m modelgate``."""
    started = Path(sys.argv[0])
    if started.name != "modelgate":
        return f"{sys.executable} -m modelgate"
    on_path = shutil.which("modelgate")
    if on_path is not None and Path(on_path).resolve() == started.resolve():
        return "modelgate"
    return str(started)

"""`modelgate serve` as a real process: the first-start secrets printed once or written to a 0600
`--bootstrap-file` (and then printed nowhere), the later-start hint, and "served by the built-in
simulator" said only of models the simulator really serves."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.gateway_server import free_port

SECRET = "serve-banner-secret-" + "q" * 40


@contextmanager
def serving(
    data_dir: Path, *args: str, command: Sequence[str] = (sys.executable, "-m", "modelgate")
) -> Iterator[tuple[str, str]]:
    """(base URL, everything printed until the server answered) of a running `modelgate serve`."""
    port = free_port()
    env = _env()
    env.update(COLUMNS="200")
    log = data_dir.parent / f"serve-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                *command,
                "serve",
                "--port",
                str(port),
                "--data-dir",
                str(data_dir),
                *args,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=data_dir.parent,
            start_new_session=True,  # its own process group, ended as a whole below
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield url, log.read_text()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def _env() -> dict[str, str]:
    """No MODELGATE_ settings but the secret, and no virtual environment on PATH (as after
    `make serve`, which activates nothing)."""
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELGATE_")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["MODELGATE_SECRET"] = SECRET
    return env


def failed_serve(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = _env()
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "modelgate",
            "serve",
            "--port",
            str(free_port()),
            "--data-dir",
            str(data_dir),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def admin_me(url: str, token: str) -> int:
    return httpx.get(f"{url}/admin/api/me", headers={"authorization": f"Bearer {token}"}).status_code


def messages(url: str, key: str, model: str = "aria-sonnet-4.6") -> int:
    response = httpx.post(
        f"{url}/v1/messages",
        headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        json={"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "Hello"}]},
    )
    return response.status_code


def _value(printed: str, label: str) -> str:
    line = next(line for line in printed.splitlines() if line.strip().startswith(label))
    return line.split(":", 1)[1].strip()


def test_first_start_prints_secrets_once_then_a_hint(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serving(data) as (url, printed):
        assert f"dashboard: {url}/dashboard" in printed
        token, basic = _value(printed, "operator admin token"), _value(printed, "Basic key")
        assert token.startswith("mg-op-") and basic.startswith("sk-cs4-")
        assert "Try it (aria-sonnet-4.6, served by the built-in simulator, not a real model)" in printed
        assert "The built-in simulator (not a real model) serves every model." in printed
        assert admin_me(url, token) == 200 and messages(url, basic) == 200
    # Started as `make serve` starts it: the virtual environment's script, not on PATH.
    script = str(Path(sys.executable).parent / "modelgate")
    with serving(data, command=[script]) as (url, printed):
        assert token not in printed and basic not in printed and "sk-cs4-" not in printed
        assert f"New key: {script} keys create --account NAME --group Basic|Pro|Nova" in printed
        assert f"new admin token: {script} tokens create" in printed
        assert admin_me(url, token) == 200
    # The command the hint names runs from a shell that has nothing but PATH.
    assert subprocess.run([script, "keys", "--help"], env=_env(), capture_output=True).returncode == 0


def test_bootstrap_file_holds_the_secrets_and_stdout_none(tmp_path: Path) -> None:
    data, secrets_file = tmp_path / "data", tmp_path / "first-start.env"
    with serving(data, "--bootstrap-file", str(secrets_file)) as (url, printed):
        assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
        values = dict(
            line.split("=", 1) for line in secrets_file.read_text().splitlines() if not line.startswith("#")
        )
        assert set(values) == {
            "MODELGATE_ADMIN_TOKEN",
            "MODELGATE_DEMO_BASIC_KEY",
            "MODELGATE_DEMO_PRO_KEY",
            "MODELGATE_DEMO_NOVA_KEY",
        }
        for secret in values.values():
            assert secret not in printed
        assert "mg-op-" not in printed and "sk-cs4-" not in printed
        assert f"written to {secrets_file}" in printed and f". {secrets_file}" in printed
        assert '-H "x-api-key: $MODELGATE_DEMO_BASIC_KEY"' in printed
        assert admin_me(url, values["MODELGATE_ADMIN_TOKEN"]) == 200
        assert messages(url, values["MODELGATE_DEMO_BASIC_KEY"]) == 200
        # A shell reads the file as it is.
        shell = subprocess.run(
            ["sh", "-c", f'. "{secrets_file}" && printf %s "$MODELGATE_DEMO_NOVA_KEY"'],
            capture_output=True,
            text=True,
            check=True,
        )
        assert shell.stdout == values["MODELGATE_DEMO_NOVA_KEY"]
    before = secrets_file.read_text()
    with serving(data, "--bootstrap-file", str(secrets_file)) as (_, printed):
        assert f"Not a first start: nothing was written to {secrets_file}." in printed
    assert secrets_file.read_text() == before


def test_an_existing_bootstrap_file_stops_the_first_start_before_any_secret(tmp_path: Path) -> None:
    data, taken = tmp_path / "data", tmp_path / "taken.env"
    taken.write_text("keep me\n")
    refused = failed_serve(data, "--bootstrap-file", str(taken))
    assert refused.returncode == 1 and "exists" in refused.stderr
    assert taken.read_text() == "keep me\n"
    missing_dir = failed_serve(data, "--bootstrap-file", str(tmp_path / "no" / "such" / "dir.env"))
    assert missing_dir.returncode == 1 and "cannot create" in missing_dir.stderr
    # Nothing was bootstrapped: the next start is still a first start.
    with serving(data) as (_, printed):
        assert "operator admin token" in printed


def test_the_simulator_label_names_only_simulated_models(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[[providers]]\nname = "simulator"\nkind = "simulator"\n\n'
        '[[providers]]\nname = "local"\nkind = "openai-compatible"\nbase_url = "http://127.0.0.1:9"\n\n'
        '[[deployments."aria-sonnet-4.6"]]\nprovider = "local"\nupstream_model = "llama"\n'
    )
    with serving(tmp_path / "data", "--config", str(config)) as (_, printed):
        assert "Try it (aria-sonnet-4.6):" in printed
        simulated = next(line for line in printed.splitlines() if line.startswith("The built-in simulator"))
        assert "aria-haiku-4.5" in simulated and "aria-sonnet-4.6" not in simulated
        assert "every model" not in simulated


def test_a_busy_port_stops_the_start_before_any_banner_or_secret(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = failed_serve(data, "--port", str(port))
    assert refused.returncode == 1 and refused.stdout == ""
    assert f"cannot listen on 127.0.0.1:{port}: the address is already in use" in " ".join(
        refused.stderr.split()
    )
    assert f"make serve PORT={port + 1}" in refused.stderr.replace("\n", "")
    # Nothing was bootstrapped: the next start is still a first start.
    with serving(data) as (_, printed):
        assert "operator admin token" in printed

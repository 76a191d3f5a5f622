"""The systems under test, each started on core 0 against the fake upstream.

- ``modelgate``: the real gateway with a temp data dir, real keys (CLI), a large credit balance,
  rate limits far above the load, a usage record per request; providers in a config file point at
  the fake upstream (``anthropic`` kind for aria, ``openai`` kind for nova), so the benchmarked
  paths are the same-dialect passthrough hot paths.
- ``litellm``: LiteLLM's proxy (1 worker, no database, a master key), installed from PyPI into
  ``bench/.peer/venv`` on first use, with the same models pointed at the same upstream.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.procs import Proc, free_port, pinned

ROOT = Path(__file__).resolve().parent.parent
PEER_DIR = ROOT / "bench" / ".peer"
GATEWAY_CORE = 0
UPSTREAM_KEYS = {
    "BENCH_FAKE_ANTHROPIC_KEY": "sk-ant-bench-upstream",
    "BENCH_FAKE_OPENAI_KEY": "sk-bench-upstream",
}
#: Gateway model id -> (dialect of the upstream, upstream model id).
MODELS = {"aria-haiku-4.5": "claude-haiku-4-5", "nova-5.5": "gpt-5.5"}


@dataclass
class Endpoint:
    name: str  # messages | chat | responses
    path: str
    model: str
    headers: dict[str, str]

    def body(self, stream: bool, model: str | None = None) -> bytes:
        model = model or self.model
        prompt = "Say hello to the benchmark, in a few words."
        if self.name == "responses":
            data: dict[str, object] = {"model": model, "input": prompt, "max_output_tokens": 256}
        else:
            data = {"model": model, "max_tokens": 256, "messages": [{"role": "user", "content": prompt}]}
        if stream:
            data["stream"] = True
        return json.dumps(data, separators=(",", ":")).encode()


def endpoints(keys: dict[str, str], bearer_only: bool = False) -> list[Endpoint]:
    version = {"anthropic-version": "2023-06-01"}
    aria = {"authorization": f"Bearer {keys['aria']}"} if bearer_only else {"x-api-key": keys["aria"]}
    return [
        Endpoint("messages", "/v1/messages", "aria-haiku-4.5", {**aria, **version}),
        Endpoint("chat", "/v1/chat/completions", "nova-5.5", {"authorization": f"Bearer {keys['nova']}"}),
        Endpoint("responses", "/v1/responses", "nova-5.5", {"authorization": f"Bearer {keys['nova']}"}),
    ]


def direct_endpoints() -> list[Endpoint]:
    """The same requests sent straight to the fake upstream (upstream model ids)."""
    anthropic = {"x-api-key": UPSTREAM_KEYS["BENCH_FAKE_ANTHROPIC_KEY"], "anthropic-version": "2023-06-01"}
    openai = {"authorization": f"Bearer {UPSTREAM_KEYS['BENCH_FAKE_OPENAI_KEY']}"}
    return [
        Endpoint("messages", "/v1/messages", MODELS["aria-haiku-4.5"], anthropic),
        Endpoint("chat", "/v1/chat/completions", MODELS["nova-5.5"], openai),
        Endpoint("responses", "/v1/responses", MODELS["nova-5.5"], openai),
    ]


@dataclass
class Target:
    name: str
    proc: Proc
    port: int
    endpoints: list[Endpoint]

    def stop(self) -> None:
        self.proc.stop()


def pooled(name: str, size: int) -> list[str]:
    """``size`` environment variable names for the upstream key ``name`` (``_env`` sets them)."""
    return [name if i == 0 else f"{name}_{i}" for i in range(size)]


#: The most credentials a pool of ``start_modelgate(pool=...)`` may have.
MAX_POOL = 8


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELGATE_")}
    env.update(UPSTREAM_KEYS)
    for name, value in UPSTREAM_KEYS.items():
        env.update({alias: value for alias in pooled(name, MAX_POOL)})
    return env


GATEWAY_CONFIG = """\
{top}
log_level = "warning"
default_provider = ""
unrouted = "hide"

[server]
host = "127.0.0.1"
port = {port}
max_in_flight = 1000000
access_log = false
{workers}

[[providers]]
name = "fake-anthropic"
kind = "anthropic"
base_url = "http://127.0.0.1:{upstream}"
api_key_env = {anthropic_keys}
max_concurrency = 4096

[[providers]]
name = "fake-openai"
kind = "openai"
base_url = "http://127.0.0.1:{upstream}"
api_key_env = {openai_keys}
max_concurrency = 4096

[deployments]
"aria-haiku-4.5" = [{{ provider = "fake-anthropic", upstream_model = "claude-haiku-4-5" }}]
"nova-5.5" = [{{ provider = "fake-openai", upstream_model = "gpt-5.5" }}]
"""


def _cli(args: list[str], config: Path, data_dir: Path) -> dict[str, object]:
    cmd = [sys.executable, "-m", "modelgate", *args, "--config", str(config), "--data-dir", str(data_dir)]
    done = subprocess.run([*cmd, "--json"], env=_env(), capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"bench: `modelgate {' '.join(args)}` failed:\n{done.stdout}{done.stderr}")
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


#: ``--limits`` of the benches: the bench keys' limits, none of them ever reached (what is measured
#: is what checking them costs). ``rpm``: requests per minute only; ``rpm-month``: with a monthly
#: cap; ``all``: with tokens per minute and requests in flight too, and the account's limits.
KEY_LIMITS = {
    "rpm": ["--rpm", "100000000"],
    "rpm-month": ["--rpm", "100000000", "--monthly-cap", "1000000000"],
    "all": [
        *("--rpm", "100000000", "--monthly-cap", "1000000000"),
        *("--tpm", "2000000000", "--concurrency", "100000"),
    ],
}
ACCOUNT_LIMITS = ["--rpm", "100000000", "--tpm", "2000000000", "--concurrency", "100000"]


def _cli_if_known(args: list[str], config: Path, data_dir: Path) -> None:
    """``_cli`` for a command the tree under test may not have (then said, and skipped)."""
    cmd = [sys.executable, "-m", "modelgate", *args, "--config", str(config), "--data-dir", str(data_dir)]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, check=False)
    if done.returncode:
        print(f"bench: `modelgate {' '.join(args)}` is not known to this tree; skipped")


def start_modelgate(
    upstream_port: int,
    workdir: Path,
    *,
    name: str = "modelgate",
    workers: int = 1,
    cores: str = str(GATEWAY_CORE),
    database_url: str | None = None,
    redis_url: str | None = None,
    pool: int = 1,
    limits: str = "rpm",
) -> Target:
    """The gateway with ``workers`` serving processes pinned to ``cores``; SQLite in a temp data
    dir unless ``database_url`` (then ``redis_url`` shares the rate-limit windows). ``pool`` > 1:
    each provider has that many credentials (the same key under several names), so session
    affinity keys and pins every request. ``limits``: what the bench keys carry (``KEY_LIMITS``)."""
    port = free_port()
    data_dir = workdir / f"{name}-data"
    config = workdir / f"{name}.toml"
    top = [f'database_url = "{database_url}"'] if database_url else []
    top += [f'redis_url = "{redis_url}"'] if redis_url else []
    # ``workers`` only when several: the config stays valid for a tree without the key (bench.ab).
    line = f"workers = {workers}" if workers > 1 else ""
    names = {name: pooled(name, pool) for name in UPSTREAM_KEYS}
    text = GATEWAY_CONFIG.format(
        top="\n".join(top),
        port=port,
        upstream=upstream_port,
        workers=line,
        anthropic_keys=json.dumps(
            names["BENCH_FAKE_ANTHROPIC_KEY"] if pool > 1 else "BENCH_FAKE_ANTHROPIC_KEY"
        ),
        openai_keys=json.dumps(names["BENCH_FAKE_OPENAI_KEY"] if pool > 1 else "BENCH_FAKE_OPENAI_KEY"),
    )
    config.write_text(text)
    _cli(["accounts", "create", "bench", "--credits", "1000000000"], config, data_dir)
    keys = {}
    for family, group in (("aria", "Pro"), ("nova", "Nova")):
        issued = _cli(
            ["keys", "create", "--account", "bench", "--group", group, *KEY_LIMITS[limits]], config, data_dir
        )
        keys[family] = str(issued["secret"])
    if limits == "all":  # the account's too, where the tree has them (a tree without: key limits only)
        _cli_if_known(["accounts", "update", "bench", *ACCOUNT_LIMITS], config, data_dir)
    cmd = [sys.executable, "-m", "modelgate", "serve", "--config", str(config)]
    cmd += ["--data-dir", str(data_dir), "--no-bootstrap"]
    proc = Proc(name, pinned(cmd, cores), env=_env(), log=workdir / f"{name}.log")
    proc.wait_http(f"http://127.0.0.1:{port}/healthz", 30)
    if workers > 1:
        proc.wait_workers(f"http://127.0.0.1:{port}/health", workers, 60)
    return Target(name, proc, port, endpoints(keys))


def restart_modelgate(target: Target, workdir: Path) -> Target:
    """A stopped single-process gateway of ``start_modelgate`` started again on its own data."""
    config, data_dir = workdir / f"{target.name}.toml", workdir / f"{target.name}-data"
    cmd = [sys.executable, "-m", "modelgate", "serve", "--config", str(config)]
    cmd += ["--data-dir", str(data_dir), "--no-bootstrap"]
    log = workdir / f"{target.name}-restarted.log"
    proc = Proc(target.name, pinned(cmd, GATEWAY_CORE), env=_env(), log=log)
    proc.wait_http(f"http://127.0.0.1:{target.port}/healthz", 120)
    return Target(target.name, proc, target.port, target.endpoints)


# --- LiteLLM -------------------------------------------------------------------------------------

PEER_MASTER_KEY = "sk-bench-litellm-master"
PEER_CONFIG = """\
model_list:
  - model_name: aria-haiku-4.5
    litellm_params:
      model: anthropic/claude-haiku-4-5
      api_base: http://127.0.0.1:{upstream}
      api_key: os.environ/BENCH_FAKE_ANTHROPIC_KEY
  - model_name: nova-5.5
    litellm_params:
      model: openai/gpt-5.5
      api_base: http://127.0.0.1:{upstream}/v1
      api_key: os.environ/BENCH_FAKE_OPENAI_KEY
litellm_settings:
  set_verbose: false
  telemetry: false
general_settings:
  master_key: {master}
"""


def peer_litellm_bin() -> Path:
    """LiteLLM's proxy in its own venv (``bench/.peer/venv``), installed from PyPI on first use."""
    venv = PEER_DIR / "venv"
    exe = venv / "bin" / "litellm"
    if exe.exists():
        return exe
    print("bench: installing LiteLLM's proxy into bench/.peer/venv (pip install 'litellm[proxy]') ...")
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "-q", "--upgrade", "pip"],
        [str(venv / "bin" / "pip"), "install", "-q", "litellm[proxy]"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode or (step[-1] == "litellm[proxy]" and not exe.exists()):
            raise SystemExit(
                "bench --peer litellm: could not install LiteLLM's proxy from PyPI "
                f"(`{' '.join(step)}` exited {done.returncode}).\n"
                f"{(done.stdout + done.stderr)[-3000:]}\n"
                "The peer comparison needs network access to PyPI; run without --peer to bench "
                "modelgate alone, or remove bench/.peer/ and retry."
            )
    return exe


def start_litellm(upstream_port: int, workdir: Path) -> Target:
    exe = peer_litellm_bin()
    port = free_port()
    config = workdir / "litellm.yaml"
    config.write_text(PEER_CONFIG.format(upstream=upstream_port, master=PEER_MASTER_KEY))
    env = _env()
    for name in ("DATABASE_URL", "REDIS_HOST", "REDIS_URL"):
        env.pop(name, None)
    env.update(
        {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no network fetch at start
            "LITELLM_LOG": "ERROR",
            "LITELLM_TELEMETRY": "False",
            "DISABLE_SCHEMA_UPDATE": "True",
        }
    )
    cmd = [
        str(exe),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    proc = Proc("litellm", pinned(cmd, GATEWAY_CORE), env=env, log=workdir / "litellm.log")
    proc.wait_http(f"http://127.0.0.1:{port}/health/liveliness", 180)
    keys = {"aria": PEER_MASTER_KEY, "nova": PEER_MASTER_KEY}
    return Target("litellm", proc, port, endpoints(keys, bearer_only=True))

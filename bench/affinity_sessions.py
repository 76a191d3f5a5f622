"""The sessions ``bench.affinity`` replays: Claude-Code-shaped conversations in Messages or
Responses form (a 6 KB system prompt in three blocks, two with cache breakpoints; four tools; a
CLAUDE.md reminder and the task in the first user turn; tool results after; the breakpoint on the
newest user message), and the prompt-cache figures of their answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SYSTEM_TEXT = (
    "You are an interactive CLI tool that helps users with software engineering tasks. "
    "Follow the repository's conventions, run the tests, keep changes small and explain them. "
) * 28
ENVIRONMENT = "<env>Working directory: /src/project\nPlatform: linux\nIs a git repository: true</env>\n" * 12
SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332; cc_entrypoint=cli;"},
    {"type": "text", "text": SYSTEM_TEXT, "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": ENVIRONMENT, "cache_control": {"type": "ephemeral"}},
]
TOOLS = [
    {
        "name": name,
        "description": f"{name}: {purpose}",
        "input_schema": {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]},
    }
    for name, purpose, arg in (
        ("Bash", "Run a shell command in the working directory and return its output.", "command"),
        ("Read", "Read a file from the local filesystem, with line numbers.", "file_path"),
        ("Edit", "Replace an exact string in a file with another string.", "file_path"),
        ("Grep", "Search file contents with a regular expression.", "pattern"),
    )
]
CLAUDE_MD = "<system-reminder>\n# CLAUDE.md\n" + "- Run `make lint` and the tests before committing.\n" * 30
TOOL_OUTPUT = "src/module.py:42: def handle(request):  # the function under change\n" * 18


@dataclass
class Session:
    number: int
    fmt: str
    identifiers: bool
    #: Messages: user/assistant turns; Responses: input items.
    history: list[dict[str, Any]] = field(default_factory=list)

    def request(self, turn: int, model: str) -> tuple[str, dict[str, Any], dict[str, str]]:
        """(path, body, headers) of the session's next turn."""
        task = f"Session {self.number}: fix the failing test in module {self.number} and explain the cause."
        if self.fmt == "messages":
            if turn == 0:
                content: list[dict[str, Any]] = [
                    {"type": "text", "text": CLAUDE_MD + "</system-reminder>"},
                    {"type": "text", "text": task},
                ]
            else:
                result = f"turn {turn}\n{TOOL_OUTPUT}"
                content = [
                    {"type": "tool_result", "tool_use_id": f"toolu_{self.number}_{turn}", "content": result}
                ]
            for message in self.history:  # the breakpoint moves to the newest user message
                for block in message["content"]:
                    if isinstance(block, dict):
                        block.pop("cache_control", None)
            content[-1]["cache_control"] = {"type": "ephemeral"}
            self.history.append({"role": "user", "content": content})
            body: dict[str, Any] = {
                "model": model,
                "max_tokens": 1024,
                "system": SYSTEM,
                "tools": TOOLS,
                "messages": self.history,
            }
            headers = {"x-claude-code-session-id": f"cc-bench-{self.number}"} if self.identifiers else {}
            return "/v1/messages", body, headers
        text = CLAUDE_MD + "</system-reminder>\n" + task if turn == 0 else f"turn {turn}\n{TOOL_OUTPUT}"
        self.history.append(
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        )
        body = {
            "model": model,
            "instructions": SYSTEM_TEXT + ENVIRONMENT,
            "tools": [
                {
                    "type": "function",
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                }
                for t in TOOLS
            ],
            "input": self.history,
            "store": False,
        }
        headers = {}
        if self.identifiers:
            body["prompt_cache_key"] = f"thread-bench-{self.number}"
            headers["session_id"] = f"codex-bench-{self.number}"
        return "/v1/responses", body, headers

    def answered(self, reply: dict[str, Any]) -> None:
        if self.fmt == "messages":
            turn = len(self.history)
            content = [*reply["content"], {"type": "tool_use", "id": f"toolu_{self.number}_{turn // 2 + 1}",
                                           "name": "Bash", "input": {"command": "make test"}}]  # fmt: skip
            self.history.append({"role": "assistant", "content": content})
        else:
            self.history.extend(
                {"type": "message", "role": "assistant", "content": item["content"]}
                for item in reply["output"]
                if item.get("type") == "message"
            )


@dataclass
class Figures:
    prompt: int = 0
    read: int = 0
    written: int = 0
    requests: int = 0
    failed: int = 0

    @property
    def share(self) -> float:
        return self.read / self.prompt if self.prompt else 0.0

    @property
    def cost(self) -> float:
        """The prompt's cost in input-token units."""
        return (self.prompt - self.read - self.written) + 1.25 * self.written + 0.1 * self.read

    def add(self, fmt: str, usage: dict[str, Any]) -> None:
        self.requests += 1
        if fmt == "messages":
            read = int(usage.get("cache_read_input_tokens") or 0)
            written = int(usage.get("cache_creation_input_tokens") or 0)
            self.prompt += int(usage["input_tokens"]) + read + written
            self.read += read
            self.written += written
        else:
            self.prompt += int(usage["input_tokens"])
            self.read += int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)

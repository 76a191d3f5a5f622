"""What a 404 for a path no route serves says: most such paths are a client's base URL set one
``/v1`` too many or too few, so the message names the base URL each client family takes."""

from __future__ import annotations

from collections.abc import Mapping

#: What clients append to their base URL, longest first (so ``/messages/count_tokens`` is found
#: before ``/messages``).
_ENDPOINTS = (
    "/messages/count_tokens",
    "/chat/completions",
    "/messages",
    "/responses",
    "/models",
)


def unknown_path_message(method: str, path: str, headers: Mapping[str, str], scheme: str) -> str:
    message = f"no endpoint {method} {path}"
    host = headers.get("host") or "HOST:PORT"
    root = f"{scheme}://{host}"
    takes = (
        f"Anthropic SDKs and Claude Code take the base URL {root}; OpenAI SDKs, Codex and "
        f"AI SDK providers take {root}/v1"
    )
    if path.startswith("/v1/v1/"):
        return f"{message}: the base URL ends in /v1 and the client adds /v1 itself. {takes}"
    suffix = next((s for s in _ENDPOINTS if path.endswith(s) or (s + "/") in path), None)
    # Under /v1beta (a version only one format serves) a path is a wrong route, not a wrong base URL.
    if suffix is not None and not path.startswith(("/v1/", "/v1beta/")):
        return f"{message}: the endpoints are under /v1 ({root}/v1{suffix}). {takes}"
    return message

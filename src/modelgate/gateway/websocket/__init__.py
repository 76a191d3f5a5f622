"""Responses over WebSocket (``GET /v1/responses`` upgraded): Codex's and the OpenAI API's
WebSocket mode, served by the same request path as HTTP (docs/wire-formats.md)."""

from modelgate.gateway.websocket.endpoint import PATH, ResponsesSocket

__all__ = ["PATH", "ResponsesSocket"]

"""A ``response.create`` on a socket is traced like an HTTP request: one server span with the
phase and attempt spans under it, continuing the trace context Codex sends in each message's
``client_metadata.traceparent``."""

from __future__ import annotations

from tests.observability.otlp import SERVER
from tests.observability.test_tracing import World, traceparent, world  # noqa: F401  (the fixture)
from tests.websocket.conftest import completed, open_socket


def test_a_socket_request_is_a_span_tree_continuing_its_message_trace(world: World) -> None:  # noqa: F811
    header, trace_id, parent_id = traceparent()
    with open_socket(world.gateway, world.nova) as socket:
        completed(
            socket, model="nova-5.5", input="Hello there traces", client_metadata={"traceparent": header}
        )
    spans = world.spans(trace_id)
    (server,) = [s for s in spans if s.kind == SERVER]
    assert server.name == "GET /v1/responses" and server.parent_span_id == parent_id
    assert server.attributes["modelgate.transport"] == "websocket"
    assert server.attributes["gen_ai.usage.output_tokens"] == 9
    children = {s.name for s in spans if s.parent_span_id == server.span_id}
    assert children == {"authenticate", "reserve", "chat gpt-up", "settle"}

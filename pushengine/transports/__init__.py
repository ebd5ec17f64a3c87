"""The transports that carry a session's events to its client.

Each is one module plus one route, and an adapter of the core's delivery
interface (``pushengine.core.sessions.Delivery``):

- long-polling: ``session.get_events`` over ``POST /api/jsonrpc`` (the parked
  poll itself is the core's ``LongPoll``; the HTTP side is ``web.app``);
- ``sse``: Server-Sent Events, ``GET /api/events``;
- ``websocket``: JSON-RPC both ways, ``GET /api/ws``.

What every transport checks before it serves a request (the API key, the
browser origin, CORS headers, the client's identity) is the edge's policy,
``pushengine.web.policy``; each route is an entry of ``pushengine.web.routes``.
"""

"""The transports that carry a session's events to its client.

Each is one module plus one route, and an adapter of the core's delivery
interface (``pushengine.core.sessions.Delivery``: told by ``notify`` that
events wait in the session's log, it takes them in its own way; ``close``
when replaced):

- ``longpoll``: ``session.get_events`` over ``POST /api/jsonrpc``: a poll
  answers what waits, or parks as the session's delivery until events come
  or its timeout passes (the API reaches it as ``core.interfaces.Poller``;
  the HTTP side is ``web.app``); ``timeouts``: the parked polls' timeouts,
  one timer wheel;
- ``sse``: Server-Sent Events, ``GET /api/events``;
- ``websocket``: JSON-RPC both ways, ``GET /api/ws``.

What every transport checks before it serves a request (the API key, the
browser origin, CORS headers, the client's identity) is the edge's policy,
``pushengine.web.policy``; each route is an entry of ``pushengine.web.routes``.
"""

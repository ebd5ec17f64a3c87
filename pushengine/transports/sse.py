"""Server-Sent Events: ``GET /api/events?session=SID`` (SPEC section 10).

The answer is ``text/event-stream``: an ``: open`` comment (the head leaves
at once), then one message per event, ``id: <seq>`` and ``data: <the event
JSON>`` (no ``event:`` field, so that every message reaches ``onmessage``),
the first of them also carrying ``retry: 3000`` (a block without data would
reach clients that read every message as an event as an empty one), and a ``: ping`` comment after 15
to 20 seconds of silence so that proxies keep the stream open (one sweep for
all streams: ``heartbeat.py``). A browser that
reconnects sends ``Last-Event-ID``; ``?last_event_id=N`` does the same by hand:
the session then writes every later event again, once, in order (or one
``reset`` per view when N is older than its replay buffer).

The stream is the session's delivery (``pushengine.core.sessions.Delivery``) until
the client goes away or another delivery replaces it (then it is closed). It
registers as the request's push producer: when the client stops reading and
the socket's buffer fills, twisted.web pauses it, the session stops writing
to it and its events wait in the log (which overflows into a reset).
"""
from __future__ import annotations

from typing import Any, Sequence

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from pushengine.core.errors import ApiError, UnknownSession
from pushengine.core.events import DROPPED, Fragment, utf8
from pushengine.core.numbers import parse_decimal
from pushengine.web.policy import HttpPolicy
from pushengine.web.timing import Clock
from pushengine.transports.heartbeat import Heartbeat
from pushengine.transports.producer import StreamProducer

log = Logger()
PING_INTERVAL = 15.0
HEAD = b": open\n\n"
RETRY = b"retry: 3000\n"          # with the stream's first message
PING = b": ping\n\n"


def sse_messages(first: int, fragments: Sequence[Fragment]) -> bytes:
    """One SSE message per queued event, numbered from ``first`` (the
    fragments' bytes are shared by every stream that carries them)."""
    if len(fragments) == 1 and fragments[0] is not DROPPED:
        return b'id: %d\ndata: {"seq":%d,%b\n\n' % (first, first, fragments[0].utf8)
    return b"".join([b'id: %d\ndata: {"seq":%d,%b\n\n' % (seq, seq, utf8(f))
                     for seq, f in enumerate(fragments, first) if f is not DROPPED])


class SseStream(StreamProducer):
    """One open event stream: a delivery of the session it is attached to."""

    def __init__(self, request: Any, clock: Any, sessions: Any,
                 heartbeat: Heartbeat | None = None) -> None:
        self.request = request
        self.clock = clock
        self.sessions = sessions
        self.heartbeat = heartbeat
        self.session: Any = None
        self.paused = False
        self.closed = False
        self.last_write = clock.seconds()
        self.retry = RETRY               # written with the first message, then b""

    # -- Delivery ------------------------------------------------------------
    def write(self, first: int, fragments: Sequence[Fragment]) -> None:
        if self.closed:
            return
        if self.retry:
            self.retry, data = b"", self.retry + sse_messages(first, fragments)
            self.request.write(data)
        else:
            self.request.write(sse_messages(first, fragments))
        self.last_write = self.clock.seconds()

    def writable(self) -> bool:
        # nothing before the answer's head is written (start)
        return self.session is not None and not self.paused and not self.closed

    def notify(self, session: Any) -> None:
        """Events wait in ``session``'s log: write them if the client reads
        (``writable``, inlined: this is the fan-out's path)."""
        if self.session is not None and not self.paused and not self.closed:
            self.sessions.events_out += session.log.write(self.write)

    def close(self) -> None:
        """Replaced by another delivery, or the session ended."""
        if self.closed:
            return
        self.closed = True
        self._stop_pinging()
        try:
            self.request.unregisterProducer()
            self.request.finish()
        except Exception:
            log.failure("finishing an event stream failed")


    # -- lifetime --------------------------------------------------------------
    def start(self, session: Any) -> None:
        self.session = session
        if self.heartbeat is not None:
            self.heartbeat.add(self)

    def ping(self, now: float) -> None:
        """Silent for the heartbeat's interval: a comment keeps proxies open."""
        if not self.paused and not self.closed:
            self.request.write(PING)
        self.last_write = now

    def _stop_pinging(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.discard(self)

    def lost(self, _: Any = None) -> None:
        """The client went away: the session may expire from now on."""
        self._stop_pinging()
        if not self.closed:
            self.closed = True
            if self.session is not None:
                self.sessions.detach(self.session, self)


def _last_event_id(request: Any) -> int | None | str:
    """The seq the client last received, None for none, or an error text."""
    raw = request.getHeader(b"last-event-id")
    if raw is None:
        raw = (request.args.get(b"last_event_id") or [None])[0]
    if raw is None or raw in (b"", ""):
        return None
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "replace")
    seq = parse_decimal(raw.strip(b" \t"), 16)
    if seq is None:
        return "Last-Event-ID must be the seq of an event (a whole number)"
    return seq


class EventsResource(Resource):
    """``GET /api/events``: a session's events as Server-Sent Events."""

    isLeaf = True

    def __init__(self, api: Any, policy: HttpPolicy, clock: Clock) -> None:
        super().__init__()
        self.api = api
        self.policy = policy
        self.clock = clock
        self.heartbeat = Heartbeat(clock, PING_INTERVAL)

    def render_OPTIONS(self, request: Any) -> bytes:
        self.policy.cors(request)
        request.setResponseCode(204)
        return b""

    def render_GET(self, request: Any) -> bytes | int:
        self.policy.cors(request)
        refused = self.policy.refuse_stream(request)
        if refused is not None:
            return refused
        sid = (request.args.get(b"session") or [b""])[0].decode("latin-1")
        if not sid:
            return self.policy.stream_answer(request, 400, -32602,
                                             "the session parameter is required")
        last = _last_event_id(request)
        if isinstance(last, str):
            return self.policy.stream_answer(request, 400, -32602, last)
        stream = SseStream(request, self.clock, self.api.sessions, self.heartbeat)
        try:
            result = self.api.stream(sid, stream, last)
        except ApiError as e:
            return self._refused(request, e)
        if isinstance(result, Deferred):
            finished = request.notifyFinish()
            result.addCallbacks(lambda session: self._open(request, stream, session),
                                lambda f: self._failed(request, f))
            finished.addErrback(stream.lost)
            return NOT_DONE_YET
        self._open(request, stream, result)
        return NOT_DONE_YET

    def _open(self, request: Any, stream: SseStream, session: Any) -> None:
        if stream.closed and stream.session is None:
            # the client went away while the session was being resumed
            self.api.sessions.detach(session, stream)
            return
        request.setResponseCode(200)
        request.setHeader(b"content-type", b"text/event-stream")
        request.setHeader(b"cache-control", b"no-store")
        request.setHeader(b"x-accel-buffering", b"no")
        request.write(HEAD)
        request.registerProducer(stream, True)
        request.notifyFinish().addBoth(stream.lost)
        stream.start(session)
        # events written while attaching waited for the head: write them now
        self.api.sessions.resume_writing(session, stream)

    def _refused(self, request: Any, error: ApiError) -> bytes:
        if isinstance(error, UnknownSession):
            return self.policy.stream_answer(request, 404, 1001, "unknown session")
        return self.policy.stream_answer(request, 400, error.code, error.message)

    def _failed(self, request: Any, failure: Failure) -> None:
        if request.finished or getattr(request, "_disconnected", False):
            return
        if isinstance(failure.value, ApiError):
            body = self._refused(request, failure.value)
        else:
            log.failure("opening an event stream failed", failure)
            body = self.policy.stream_answer(request, 500, -32603, "internal error")
        request.write(body)
        request.finish()

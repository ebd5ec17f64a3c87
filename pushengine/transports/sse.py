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
registers as the connection's push producer: when the client stops reading
and the socket's buffer fills, the transport pauses it, the session stops
writing to it and its events wait in the log (which overflows into a reset).

When the node shuts down (SPEC 21, ``EventsResource.close_all``) each
stream writes what waits for it, then one last message, ``event:
going-away`` with ``data: {"code":1001,"reason":"the node is shutting
down"}`` (a named event: it never reaches ``onmessage``, and carries no
``id``, so the last event's id stays the one to resume from), and ends at
that message's boundary: the chunked body terminated (``0\r\n\r\n``), the
connection closed. A browser's EventSource reconnects by itself (after
``retry``, with ``Last-Event-ID``); the JS client reconnects at once when
it saw ``going-away``. Behind a balancer the next node answers, and with
``--redis`` the session resumes there.

Both fronts serve the route with the same stream (``SseStream``) and the same
checks (``EventsResource.opening``): twisted.web through its Request
(``render_GET``, which frames the body), the fast front by handing over the
connection itself (``EventsResource.stream``): the stream writes the head
and the chunk-framed messages straight to the socket and becomes its
protocol, so that a held stream costs its socket, this object and its
session, nothing of HTTP.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from twisted.internet.defer import Deferred
from twisted.web.http import parse_qs
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from pushengine.core.errors import ApiError, UnknownSession
from pushengine.core.events import DROPPED, Fragment, utf8
from pushengine.core.numbers import parse_decimal
from pushengine.web.policy import KEY_HEADER, HttpPolicy, date_line, status_line, stream_error
from pushengine.web.routes import HttpAnswer, StreamAnswer, StreamLink, StreamRequest
from pushengine.web.timing import Clock
from pushengine.transports.closing import SHUTTING_DOWN, Departures
from pushengine.transports.heartbeat import Heartbeat
from pushengine.transports.producer import StreamProducer

log = Logger()
PING_INTERVAL = 15.0    # --sse-ping: a comment after 15 s of silence (SPEC section 10)
HEAD = b": open\n\n"
RETRY = b"retry: 3000\n"          # with the stream's first message
PING = b": ping\n\n"


def going_away(reason: str = SHUTTING_DOWN) -> bytes:
    """The last message of a stream whose node shuts down: a named event
    (not an event of the session: no ``id``, and it never reaches
    ``onmessage``)."""
    data = json.dumps({"code": 1001, "reason": reason}, separators=(",", ":"))
    return b"event: going-away\ndata: %b\n\n" % data.encode()


def sse_messages(first: int, fragments: Sequence[Fragment]) -> bytes:
    """One SSE message per queued event, numbered from ``first`` (the
    fragments' bytes are shared by every stream that carries them)."""
    if len(fragments) == 1 and fragments[0] is not DROPPED:
        return b'id: %d\ndata: {"seq":%d,%b\n\n' % (first, first, fragments[0].utf8)
    return b"".join([b'id: %d\ndata: {"seq":%d,%b\n\n' % (seq, seq, utf8(f))
                     for seq, f in enumerate(fragments, first) if f is not DROPPED])


def _request_write(request: Any, data: bytes) -> None:
    request.write(data)


class StreamHub:
    """What every stream of the route shares (one object, not one per
    stream): the clock, the sessions, the heartbeat."""

    __slots__ = ("clock", "sessions", "heartbeat", "departures")

    def __init__(self, clock: Any, sessions: Any, heartbeat: Heartbeat | None,
                 departures: Departures | None = None) -> None:
        self.clock = clock
        self.sessions = sessions
        self.heartbeat = heartbeat
        self.departures = departures if departures is not None else Departures()


class SseStream(StreamProducer):
    """One open event stream: a delivery of the session it is attached to.

    It writes to ``out`` with ``send(out, data)``: a twisted.web Request
    (which frames the body itself), or the raw transport of a connection the
    fast front handed over (``raw``: the stream frames chunks when
    ``chunked``, ends the answer itself and is the socket's protocol)."""

    __slots__ = ("out", "send", "raw", "chunked", "hub", "closed", "last_write", "retry")
    transport_name = "sse"      # the label of /metrics' delivery times

    def __init__(self, hub: StreamHub, out: Any = None, send: Any = _request_write) -> None:
        self.hub = hub
        self.out = out
        self.send = send
        self.raw = False
        self.chunked = False
        self.sessions = hub.sessions
        self.session: Any = None
        self.paused = False
        self.closed = False
        self.last_write = hub.clock.seconds()
        self.retry = RETRY               # written with the first message, then b""

    def _send(self, data: bytes) -> None:
        if self.chunked:
            data = b"%x\r\n%b\r\n" % (len(data), data)
        self.send(self.out, data)

    # -- Delivery ------------------------------------------------------------
    def write(self, first: int, fragments: Sequence[Fragment]) -> None:
        if self.closed:
            return
        if self.retry:
            self.retry, data = b"", self.retry + sse_messages(first, fragments)
        else:
            data = sse_messages(first, fragments)
        if self.chunked:
            data = b"%x\r\n%b\r\n" % (len(data), data)
        self.send(self.out, data)
        self.last_write = self.hub.clock.seconds()

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
        out = self.out
        try:
            out.unregisterProducer()
            if not self.raw:
                out.finish()
                return
            if self.chunked:
                self.send(out, b"0\r\n\r\n")
            out.loseConnection()
        except Exception:
            log.failure("finishing an event stream failed")

    def go_away(self, reason: str = SHUTTING_DOWN) -> None:
        """The node shuts down: write what waits for the client (even one
        that reads slowly: at most ``--max-queue`` events), a ``going-away``
        message, and end the answer at that message's boundary (the chunked
        body terminated). The session stays: the client resumes it, here
        or, with ``--redis``, on another node."""
        if self.closed:
            return
        session = self.session
        if session is not None:
            self.sessions.events_out += session.log.write(self.write)
            self.session = None
            self.sessions.detach(session, self)
        self.hub.departures.leave(self)
        try:
            self._send(going_away(reason))
        except Exception:
            log.failure("writing the last message of an event stream failed")
        self.close()

    def abort(self) -> None:
        """Cut the connection (the shutdown's deadline passed)."""
        out = self.out
        transport = out if self.raw else getattr(out, "transport", None)
        abort = getattr(transport, "abortConnection", None)
        if abort is not None:
            abort()

    # -- lifetime --------------------------------------------------------------
    def start(self, session: Any) -> None:
        self.session = session
        heartbeat = self.hub.heartbeat
        if heartbeat is not None:
            heartbeat.add(self)

    def ping(self, now: float) -> None:
        """Silent for the heartbeat's interval: a comment keeps proxies open."""
        if not self.paused and not self.closed:
            self._send(PING)
        self.last_write = now

    def _stop_pinging(self) -> None:
        heartbeat = self.hub.heartbeat
        if heartbeat is not None:
            heartbeat.discard(self)

    def lost(self, _: Any = None) -> None:
        """The client went away: the session may expire from now on."""
        self._stop_pinging()
        self.hub.departures.gone(self)
        if not self.closed:
            self.closed = True
            if self.session is not None:
                self.sessions.detach(self.session, self)

    # -- the socket's protocol, once the fast front handed the connection over ----
    def dataReceived(self, data: bytes) -> None:
        """The client has nothing more to say on an event stream: dropped."""

    def connectionLost(self, reason: Any = None) -> None:
        self.lost()

    def makeConnection(self, transport: Any) -> None:  # pragma: no cover - never called
        self.out = transport


def last_event_id(header: bytes | None, query: bytes | str | None) -> int | None | str:
    """The seq the client last received (the ``Last-Event-ID`` header, else
    the ``last_event_id`` query value), None for none, or an error text."""
    raw = header if header is not None else query
    if raw is None or raw in (b"", ""):
        return None
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "replace")
    seq = parse_decimal(raw.strip(b" \t"), 16)
    if seq is None:
        return "Last-Event-ID must be the seq of an event (a whole number)"
    return seq


def _last_event_id(request: Any) -> int | None | str:
    return last_event_id(request.getHeader(b"last-event-id"),
                         (request.args.get(b"last_event_id") or [None])[0])


class EventsResource(Resource):
    """``GET /api/events``: a session's events as Server-Sent Events, on
    twisted.web (``render_GET``) and on the fast front (``stream``)."""

    isLeaf = True

    def __init__(self, api: Any, policy: HttpPolicy, clock: Clock,
                 ping_interval: float = PING_INTERVAL) -> None:
        super().__init__()
        self.api = api
        self.policy = policy
        self.clock = clock
        self.heartbeat = Heartbeat(clock, ping_interval)
        self.departures = Departures()
        self.hub = StreamHub(clock, api.sessions, self.heartbeat, self.departures)
        cors = b"".join(name + b": " + value + b"\r\n" for name, value in policy.cors_headers)
        # the raw answer's head after its Date line, HTTP/1.1 (chunked) and 1.0
        head = (b"Content-Type: text/event-stream\r\nCache-Control: no-store\r\n"
                b"X-Accel-Buffering: no\r\n" + cors)
        self._head11 = head + b"Transfer-Encoding: chunked\r\n\r\n" \
            + b"%x\r\n%b\r\n" % (len(HEAD), HEAD)
        self._head10 = head + b"Connection: close\r\n\r\n" + HEAD

    def close_all(self, reason: str = SHUTTING_DOWN) -> Deferred[None]:
        """The node shuts down (SPEC 21): every open stream ends after a
        ``going-away`` message (``SseStream.go_away``), and one that opens
        from now on too. Fires once every stream's connection is gone."""
        departures = self.departures
        departures.closing = True
        streams = [s for s in self.heartbeat.members() if isinstance(s, SseStream)]
        if streams:
            log.info("ending {count} event streams: {reason}", count=len(streams),
                     reason=reason)
        for stream in streams:
            try:
                stream.go_away(reason)
            except Exception:
                log.failure("ending an event stream failed")
        return departures.all_gone()

    def abort_all(self) -> None:
        """Cut the streams still open (the shutdown's deadline passed)."""
        self.departures.abort_all()

    def opening(self, sid: str, last: int | None | str, stream: SseStream,
                caller: Any = None) -> tuple[int, int | str, str] | Any:
        """Attach ``stream`` to session ``sid`` (resumed after ``last``, for
        ``caller``'s count of sessions when another node held it): the
        session (or a Deferred of it), or why not as (status, code, message)."""
        if not sid:
            return 400, -32602, "the session parameter is required"
        if isinstance(last, str):
            return 400, -32602, last
        try:
            return self.api.stream(sid, stream, last, caller)
        except ApiError as e:
            return self._why(e)

    def peek(self, sid: str, last: int | None | str) -> tuple[int, int | str, str] | None:
        """Why a stream could not open on session ``sid`` after ``last``, as
        far as the node can tell without touching the session (a HEAD is
        safe: it neither attaches nor resumes a session from the cluster);
        None when it could."""
        if not sid:
            return 400, -32602, "the session parameter is required"
        if isinstance(last, str):
            return 400, -32602, last
        if self.api.resume is not None:
            # another node may hold the session, or explain a seq ahead of
            # this node's copy: only a GET, resuming it, finds out
            return None
        sessions = self.api.sessions
        session = sessions.sessions.get(sid)
        if session is None:
            return 404, 1001, "unknown session"
        newest = sessions.last_seq(session)
        if last is not None and last > newest:
            return 400, -32602, f"{last} is ahead of the last event ({newest})"
        return None

    @staticmethod
    def _why(error: ApiError) -> tuple[int, int | str, str]:
        if isinstance(error, UnknownSession):
            return 404, 1001, "unknown session"
        return 400, error.code, error.message

    # -- the fast front: the raw connection ----------------------------------------
    def stream(self, r: StreamRequest, caller: Any, link: StreamLink) -> StreamAnswer:
        """``GET /api/events`` on the fast front: refused as on twisted.web,
        or the stream takes the connection (None)."""
        query = r.query
        refused = self.policy.stream_refusal(query, r.header(KEY_HEADER), r.header(b"origin"))
        if refused is not None:
            return _answer(refused)
        args = parse_qs(query, keep_blank_values=True) if query else {}
        sid = (args.get(b"session") or [b""])[0].decode("latin-1")
        last = last_event_id(r.header(b"last-event-id"),
                             (args.get(b"last_event_id") or [None])[0])
        stream = SseStream(self.hub)
        result = self.opening(sid, last, stream, caller)
        if isinstance(result, tuple):
            return _answer(result)
        if not isinstance(result, Deferred):
            self._take(r, link, stream, result)
            return None
        answer: Deferred[HttpAnswer | None] = Deferred(lambda _: stream.lost())

        def opened(session: Any) -> None:
            if answer.called:           # the client went away meanwhile
                self.api.sessions.detach(session, stream)
                return
            self._take(r, link, stream, session)
            answer.callback(None)

        def failed(failure: Failure) -> None:
            if answer.called:
                return
            if isinstance(failure.value, ApiError):
                answer.callback(_answer(self._why(failure.value)))
            else:
                log.failure("opening an event stream failed", failure)
                answer.callback(_answer((500, -32603, "internal error")))
        result.addCallbacks(opened, failed).addErrback(
            lambda f: log.failure("opening an event stream failed", f))
        return answer

    def _take(self, r: StreamRequest, link: StreamLink, stream: SseStream,
              session: Any) -> None:
        transport = link.take(stream)
        stream.out = transport
        stream.send = link.write_now
        stream.raw = True
        stream.chunked = r.version == "1.1"
        head = self._head11 if stream.chunked else self._head10
        link.write_now(transport, status_line(200) + date_line() + head)
        transport.registerProducer(stream, True)
        stream.start(session)
        # events written while attaching waited for the head: write them now
        self.api.sessions.resume_writing(session, stream)
        if self.departures.closing:     # opened while the node shuts down
            stream.go_away()

    # -- twisted.web ---------------------------------------------------------------------
    def render_OPTIONS(self, request: Any) -> bytes:
        self.policy.cors(request)
        request.setResponseCode(204)
        return b""

    def render_HEAD(self, request: Any) -> bytes:
        """The head a GET would get, and nothing else: no stream opens, the
        session's delivery stays as it is, and the answer ends at its blank
        line (RFC 9110 section 9.3.2). Both fronts answer it here (the fast
        front hands a HEAD on)."""
        self.policy.cors(request)
        refused = self.policy.refuse_stream(request)
        if refused is None:
            sid = (request.args.get(b"session") or [b""])[0].decode("latin-1")
            why = self.peek(sid, _last_event_id(request))
            if why is None:
                request.setResponseCode(200)
                request.setHeader(b"content-type", b"text/event-stream")
                request.setHeader(b"cache-control", b"no-store")
                request.setHeader(b"x-accel-buffering", b"no")
                return b""
            refused = self.policy.stream_answer(request, *why)
        # the length of the refusal a GET would read
        request.setHeader(b"content-length", b"%d" % len(refused))
        return b""

    def render_GET(self, request: Any) -> bytes | int:
        self.policy.cors(request)
        refused = self.policy.refuse_stream(request)
        if refused is not None:
            return refused
        sid = (request.args.get(b"session") or [b""])[0].decode("latin-1")
        stream = SseStream(self.hub, request)
        result = self.opening(sid, _last_event_id(request), stream,
                              self.policy.request_caller(request))
        if isinstance(result, tuple):
            return self.policy.stream_answer(request, *result)
        if isinstance(result, Deferred):
            finished = request.notifyFinish()
            result.addCallbacks(lambda session: self._open(request, stream, session),
                                lambda f: self._failed(request, f))
            result.addErrback(lambda f: log.failure("opening an event stream failed", f))
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
        if self.departures.closing:     # opened while the node shuts down
            stream.go_away()

    def _failed(self, request: Any, failure: Failure) -> None:
        if request.finished or getattr(request, "_disconnected", False):
            return
        if isinstance(failure.value, ApiError):
            why = self._why(failure.value)
        else:
            log.failure("opening an event stream failed", failure)
            why = (500, -32603, "internal error")
        request.write(self.policy.stream_answer(request, *why))
        request.finish()


def _answer(why: tuple[int, int | str, str]) -> HttpAnswer:
    """A refusal as the fast front writes it (JSON, ``Cache-Control:
    no-store``, the CORS headers: what ``policy.stream_answer`` sets)."""
    status, code, message = why
    return HttpAnswer(status, stream_error(code, message))

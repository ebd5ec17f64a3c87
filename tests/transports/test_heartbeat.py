"""One sweep pings every silent stream (transports/heartbeat.py), on a Clock."""
from __future__ import annotations

from twisted.internet.task import Clock

from pushengine.transports.heartbeat import Heartbeat
from pushengine.transports.sse import PING, SseStream, StreamHub


class Stream:
    def __init__(self, clock: Clock, fail: bool = False) -> None:
        self.last_write = clock.seconds()
        self.pinged: list[float] = []
        self.fail = fail

    def ping(self, now: float) -> None:
        if self.fail:
            raise RuntimeError("a broken stream")
        self.pinged.append(now)
        self.last_write = now


def test_a_silent_stream_is_pinged_within_a_third_of_the_interval_after_it():
    clock = Clock()
    beat = Heartbeat(clock, 15.0)
    s = Stream(clock)
    beat.add(s)
    clock.advance(14.9)
    assert s.pinged == []
    clock.advance(5.0)
    assert len(s.pinged) == 1 and 15.0 <= s.pinged[0] <= 20.0
    clock.pump([5.0] * 6)
    assert all(15.0 <= b - a <= 20.0 for a, b in zip(s.pinged, s.pinged[1:]))


def test_a_stream_that_writes_is_not_pinged():
    clock = Clock()
    beat = Heartbeat(clock, 15.0)
    busy, quiet = Stream(clock), Stream(clock)
    beat.add(busy)
    beat.add(quiet)
    for _ in range(12):
        clock.advance(5.0)
        busy.last_write = clock.seconds()
    assert busy.pinged == []
    assert quiet.pinged == [15.0, 30.0, 45.0, 60.0]


def test_one_timer_whatever_the_number_of_streams_and_none_when_empty():
    clock = Clock()
    beat = Heartbeat(clock, 30.0)
    streams = [Stream(clock) for _ in range(1000)]
    for s in streams:
        beat.add(s)
    assert len(clock.getDelayedCalls()) == 1
    for s in streams:
        beat.discard(s)
    clock.advance(10.0)
    assert clock.getDelayedCalls() == []
    beat.add(streams[0])                      # a new stream starts the sweep again
    assert len(clock.getDelayedCalls()) == 1


def test_a_failing_stream_is_dropped_and_the_others_keep_their_pings():
    clock = Clock()
    beat = Heartbeat(clock, 15.0)
    bad, good = Stream(clock, fail=True), Stream(clock)
    beat.add(bad)
    beat.add(good)
    clock.pump([5.0] * 8)
    assert bad not in beat.streams
    assert len(good.pinged) == 2


class Sessions:
    def __init__(self) -> None:
        self.detached: list = []

    def detach(self, session, delivery) -> None:
        self.detached.append(session)


class Request:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


def test_an_sse_stream_pings_only_while_open_and_reading():
    clock = Clock()
    beat = Heartbeat(clock, 15.0)
    request = Request()
    sessions = Sessions()
    stream = SseStream(StreamHub(clock, sessions, beat), request)
    stream.start(session=object())
    clock.pump([5.0] * 4)
    assert request.written == [PING]
    stream.pauseProducing()                    # the client stopped reading
    clock.pump([5.0] * 4)
    assert request.written == [PING]
    stream.lost()                              # gone: off the heartbeat
    assert stream not in beat.streams and len(sessions.detached) == 1

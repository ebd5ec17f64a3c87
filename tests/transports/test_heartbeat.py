"""One timer pings every silent stream (transports/heartbeat.py), on a Clock."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
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


def test_a_silent_stream_is_pinged_within_a_step_after_its_interval():
    clock = Clock()
    clock.advance(0.37)                       # streams start at any time
    beat = Heartbeat(clock, 15.0)
    assert beat.step == 1.0
    s = Stream(clock)
    beat.add(s)
    clock.pump([0.1] * 149)
    assert s.pinged == []
    clock.pump([0.1] * 11)
    assert len(s.pinged) == 1 and 15.0 <= s.pinged[0] - 0.37 <= 16.0 + 1e-9
    clock.pump([0.1] * 600)
    gaps = [b - a for a, b in zip(s.pinged, s.pinged[1:])]
    assert len(gaps) >= 3 and all(15.0 <= g <= 16.0 + 1e-9 for g in gaps)


def test_a_short_interval_steps_by_a_third_of_it():
    clock = Clock()
    beat = Heartbeat(clock, 1.5)
    s = Stream(clock)
    beat.add(s)
    clock.pump([0.5] * 12)
    assert beat.step == 0.5 and s.pinged == [1.5, 3.0, 4.5, 6.0]


def test_a_sweep_looks_only_at_the_streams_that_fall_due():
    clock = Clock()
    beat = Heartbeat(clock, 30.0)
    looked: list[int] = []

    class Counted(Stream):
        @property
        def last_write(self) -> float:
            looked.append(1)
            return self._last

        @last_write.setter
        def last_write(self, value: float) -> None:
            self._last = value

    for _ in range(1000):
        beat.add(Counted(clock))
    looked.clear()
    clock.pump([1.0] * 29)                    # 29 sweeps, none due
    assert looked == []


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


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "discard", "write", "wait"]),
                          st.integers(0, 7), st.floats(0.01, 1.0)),
                max_size=200),
       st.sampled_from([3.0, 7.5, 30.0]))
def test_every_live_stream_is_pinged_on_time_and_never_early_or_after_it_left(ops, interval):
    """Whatever the streams do: none is pinged before ``interval`` seconds
    of silence, none stays silent past ``interval`` plus a step (and the
    clock's own step), and none is pinged once discarded."""
    clock = Clock()
    beat = Heartbeat(clock, interval)
    streams: dict[int, Stream] = {}
    gone: list[Stream] = []
    written: dict[int, list[float]] = {}

    def check() -> None:
        now = clock.seconds()
        for i, s in streams.items():
            assert now - s.last_write <= interval + beat.step + 1.0 + 1e-6
            for t in s.pinged:          # each ping after a full interval of silence
                before = [w for w in written[i] if w <= t and w != t]
                assert before and t - max(before) >= interval - 1e-6
        for s in gone:
            assert not s.pinged or s.pinged[-1] <= s.left

    for action, i, dt in ops:
        if action == "add" and i not in streams:
            streams[i] = s = Stream(clock)
            written[i] = [clock.seconds()]
            beat.add(s)
        elif action == "discard" and i in streams:
            s = streams.pop(i)
            s.left = clock.seconds()
            beat.discard(s)
            gone.append(s)
        elif action == "write" and i in streams:
            streams[i].last_write = clock.seconds()
            written[i].append(clock.seconds())
        clock.advance(dt)
        for j, s in streams.items():
            written[j].extend(t for t in s.pinged if t not in written[j])
        check()
    for _ in range(int(interval) + 3):
        clock.advance(1.0)
        for j, s in streams.items():
            written[j].extend(t for t in s.pinged if t not in written[j])
        check()
    assert set(beat.streams) == set(streams.values())


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


def test_a_discarded_stream_is_held_by_nothing():
    import gc
    import weakref
    clock = Clock()
    beat = Heartbeat(clock, 15.0)
    s = Stream(clock)
    beat.add(s)
    beat.add(Stream(clock))                   # a neighbour in the same bucket
    gone = weakref.ref(s)
    gc.disable()
    try:
        beat.discard(s)
        del s
        assert gone() is None
    finally:
        gc.enable()
    clock.advance(16.0)
    assert beat.pings == 1

"""The graceful shutdown of a node (SPEC 21).

twistd turns SIGTERM and SIGINT into ``reactor.stop()``, which stops the
application's services and waits for the Deferred their ``stopService``
returns. The node's top service (``logs.NodeServices``) stops through
``Shutdown``, which first drains the node and only then stops the other
services (the feed, the Redis and memcached links...):

1. ``/health/ready`` answers 503 at once (``Node.draining``);
2. for ``--drain-delay`` seconds the node serves as before, so that a
   balancer that probes it takes it out before it stops taking connections;
3. it stops listening;
4. the HTTP connections finish up (``web/connections.py``: an idle one
   closes now, one answering closes after its answer, with
   ``Connection: close``), every parked poll answers (``[]``, or what came
   this very turn), every SSE stream ends after a ``going-away`` message
   with its chunked body terminated, every WebSocket closes with 1001
   after the answers to its calls and its session's events
   (``close_all`` of each transport);
5. once every connection is gone, or at the deadline less a moment for
   the services (``reserve``), the other services stop; what is still open
   at that point is cut (``abort_all``);
6. the process exits within ``--shutdown-timeout`` seconds of the signal
   (the drain delay counts in it), whatever a service's stop does.

A second SIGTERM or SIGINT during all this (``second_signal``, installed
when the first one starts the shutdown) hurries it: what is open is cut at
once and the services stop.

Sessions are neither destroyed nor removed from the registry: a stream that
ends detaches its session, which the registry (``--redis``) keeps, so that
the client resumes it on another node.
"""
from __future__ import annotations

import signal
from typing import Any, Callable, Protocol, Sequence

from twisted.internet.defer import Deferred, gatherResults, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()

REASON = "the node is shutting down"


class Closer(Protocol):
    """What lets its clients go when the node shuts down: a transport, or
    the HTTP connections of the fronts."""

    def close_all(self, reason: str) -> Deferred[None]:
        """Let every client go; fires once their connections are gone."""

    def abort_all(self) -> None:
        """Cut what is still open (the deadline passed)."""


class Shutdown:
    """Drains the node, then stops its services, within ``timeout`` seconds.

    ``draining``: the node is no longer ready (``/health/ready`` 503);
    ``stop_listening``: stop taking connections; ``closers``: the HTTP
    connections and the transports, told in this order (the connections
    first, so that the answers the transports cause close theirs)."""

    def __init__(self, clock: IReactorTime, drain_delay: float, timeout: float,
                 draining: Callable[[], object],
                 stop_listening: Callable[[], Deferred[Any] | None],
                 closers: Sequence[Closer],
                 on_start: Callable[["Shutdown"], object] | None = None) -> None:
        self.clock = clock
        self.drain_delay = drain_delay
        self.timeout = timeout
        self.draining = draining
        self.stop_listening = stop_listening
        self.closers = list(closers)
        # the services' own stop gets this much of the timeout at least
        self.reserve = min(1.0, timeout / 10)
        self.on_start = on_start
        self.started: float | None = None
        self.cut = False                # connections were cut at the deadline
        self.hurried = False            # a second signal: cut now
        self.phase = "serving"
        self._waiting: list[Deferred[Any]] = []    # what a hurry ends early

    def stop(self, stop_services: Callable[[], Deferred[Any] | None]) -> Deferred[None]:
        """Drain, then ``stop_services()``; fires within ``timeout``."""
        if self.started is not None:
            raise RuntimeError("the node is shutting down already")
        self.started = self.clock.seconds()
        if self.on_start is not None:
            try:
                self.on_start(self)
            except Exception:
                log.failure("preparing the shutdown failed")
        return Deferred.fromCoroutine(self._run(stop_services))

    def hurry(self) -> None:
        """Cut what is open now and stop the services (a second signal)."""
        if self.hurried or self.phase in ("serving", "stopped"):
            return
        self.hurried = True
        log.warn("a second signal: cutting every connection now")
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            if not d.called:
                d.callback(False)

    async def _run(self, stop_services: Callable[[], Deferred[Any] | None]) -> None:
        assert self.started is not None
        deadline = self.started + self.timeout
        self.phase = "draining"
        self.draining()
        log.info("shutting down: /health/ready answers 503; serving {delay:g} s more, "
                 "then closing every connection within {timeout:g} s of the signal",
                 delay=self.drain_delay, timeout=self.timeout)
        if self.drain_delay > 0 and not self.hurried:
            await self._sleep(self.drain_delay)
        self.phase = "closing"
        try:
            await maybeDeferred(self.stop_listening)
        except Exception:
            log.failure("stopping listening failed")
        closing = [self._close(closer) for closer in self.closers]
        closed = await self._within(gatherResults(closing), deadline - self.reserve)
        if not closed:
            self.cut = True
            if not self.hurried:
                log.warn("cutting what is still open at the shutdown deadline "
                         "(--shutdown-timeout {timeout:g} s)", timeout=self.timeout)
            for closer in self.closers:
                try:
                    closer.abort_all()
                except Exception:
                    log.failure("cutting connections failed")
        else:
            log.info("every client let go in {seconds:.2f} s",
                     seconds=self.clock.seconds() - self.started)
        self.phase = "stopping"
        stopped = await self._within(maybeDeferred(stop_services), deadline)
        if not stopped:
            log.warn("the node's services did not stop within the shutdown timeout; "
                     "exiting anyway")
        self.phase = "stopped"

    def _close(self, closer: Closer) -> Deferred[None]:
        d = maybeDeferred(closer.close_all, REASON)

        def failed(failure: Failure) -> None:
            log.failure("closing connections failed", failure)
        return d.addErrback(failed)

    def _sleep(self, seconds: float) -> Deferred[bool]:
        """Fires after ``seconds`` (or at once on a hurry)."""
        return self._within(Deferred(), self.clock.seconds() + seconds)

    def _within(self, d: Deferred[Any], at: float) -> Deferred[bool]:
        """True once ``d`` fires (whatever with), False at the clock's time
        ``at`` if it has not, or on a hurry; ``d`` goes on either way."""
        out: Deferred[bool] = Deferred()
        if self.hurried:
            d.addErrback(lambda f: log.failure("stopping failed", f))
            out.callback(False)
            return out
        self._waiting.append(out)

        def late() -> None:
            if not out.called:
                out.callback(False)

        def forget(result: bool) -> bool:
            if out in self._waiting:
                self._waiting.remove(out)
            if timer.active():
                timer.cancel()
            return result
        timer = self.clock.callLater(max(0.0, at - self.clock.seconds()), late)
        out.addBoth(forget)

        def done(result: Any) -> Any:
            if timer.active():
                timer.cancel()
            if not out.called:
                out.callback(True)
            if isinstance(result, Failure):
                log.failure("stopping failed", result)
            return None
        d.addBoth(done)
        return out


def second_signal(reactor: Any) -> Callable[[Shutdown], None]:
    """What the shutdown installs when it starts: a second SIGTERM or SIGINT
    hurries it (twistd's own handler would ask a stopping reactor to stop,
    and log that it cannot)."""
    def install(shutdown: Shutdown) -> None:
        def again(signum: int, frame: Any) -> None:
            reactor.callFromThread(shutdown.hurry)
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, again)
    return install

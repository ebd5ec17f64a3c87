"""``--log-format json``: one JSON object per log line.

twistd sets up the log observer after the plugin built the service: it
takes the application's ``ILogObserver`` component when there is one
(``twisted.application.app.AppLogger.start``). ``NodeServices`` is the
node's top service; given an observer, it sets that component on the
application it is added to, so the node's log goes through
``json_line`` to the same place twistd would have written its text:
``--logfile`` (rotated on SIGUSR1, as twistd does), or standard output for
``--logfile=-`` and for ``-n`` without ``--logfile``.

A line: ``{"time", "level", "namespace", "message"}``, then ``system``, the
event's own fields that are plain values (the ones its message names, such
as ``path``; at most 1,000 characters each) and, for an error, the
``traceback``.
"""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import IO, Any, Callable, cast

from twisted.application.service import MultiService
from twisted.internet.interfaces import IReactorThreads
from twisted.logger import FileLogObserver, ILogObserver, LogEvent, formatEvent
from twisted.python.components import Componentized
from twisted.python.logfile import LogFile

FORMATS = ("text", "json")
MAX_FIELD = 1000


def json_line(event: LogEvent) -> str:
    """The event as one line of JSON (with its newline)."""
    level = event.get("log_level")
    when = event.get("log_time")
    record: dict[str, Any] = {
        "time": (datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="microseconds")
                 .replace("+00:00", "Z") if isinstance(when, (int, float)) else None),
        "level": getattr(level, "name", "info"),
        "namespace": event.get("log_namespace", "-"),
        "message": formatEvent(event),
    }
    system = event.get("log_system")
    if isinstance(system, str) and system != "-":
        record["system"] = system
    for key, value in event.items():
        if key.startswith("log_") or key in record or key in ("format", "message", "isError",
                                                               "failure", "why", "system",
                                                               "time"):
            continue
        if isinstance(value, str):
            record[key] = value[:MAX_FIELD]
        elif isinstance(value, (int, float, bool)) or value is None:
            record[key] = value
    failure = event.get("log_failure")
    if failure is not None:
        try:
            record["traceback"] = failure.getTraceback()
        except Exception:
            record["traceback"] = repr(failure)
    try:
        return json.dumps(record, ensure_ascii=False, allow_nan=True,
                          default=str) + "\n"
    except ValueError:                      # (a circular value: never expected)
        return json.dumps({"time": record["time"], "level": record["level"],
                           "namespace": record["namespace"],
                           "message": str(record["message"])}) + "\n"


def json_observer(out: IO[str]) -> FileLogObserver:
    return FileLogObserver(out, json_line)


def twistd_log_file(server_options: Any) -> IO[str]:
    """Where twistd would write its log, from its own options
    (``twisted.scripts._twistd_unix.UnixAppLogger._getLogObserver``)."""
    name = server_options.get("logfile") or ""
    nodaemon = bool(server_options.get("nodaemon"))
    if name == "-" or (nodaemon and not name):
        return sys.stdout
    log_file: IO[str] = LogFile.fromFullPath(name or "twistd.log")
    try:
        import signal
    except ImportError:                     # pragma: no cover
        return log_file
    if not signal.getsignal(signal.SIGUSR1):
        def rotate(signum: int, frame: Any) -> None:
            from twisted.internet import reactor
            cast(IReactorThreads, reactor).callFromThread(getattr(log_file, "rotate"))
        signal.signal(signal.SIGUSR1, rotate)
    return log_file


class NodeServices(MultiService):
    """The node's services; with ``log_observer``, the application's log
    observer too (set when twistd adds this service to its application).

    ``stop_through(stop)``: the node stops through ``stop`` (the graceful
    shutdown, ``app/shutdown.py``), which is given the stop of the services
    and calls it when the node has let its clients go."""

    log_observer: Callable[[LogEvent], None] | None = None
    _stop: Callable[[Callable[[], Any]], Any] | None = None

    def stop_through(self, stop: Callable[[Callable[[], Any]], Any]) -> None:
        self._stop = stop

    def stopService(self) -> Any:
        stop = self._stop
        if stop is None or not self.running:
            return super().stopService()
        return stop(lambda: MultiService.stopService(self))

    def setServiceParent(self, parent: Any) -> None:
        if self.log_observer is not None and isinstance(parent, Componentized):
            parent.setComponent(ILogObserver, self.log_observer)
        super().setServiceParent(parent)

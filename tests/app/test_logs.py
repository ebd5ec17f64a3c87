"""``--log-format json``: the line format, and the observer twistd takes."""
from __future__ import annotations

import io
import json

import pytest
from twisted.application.service import Application
from twisted.logger import ILogObserver, Logger, LogLevel
from twisted.python.failure import Failure

from pushengine.app import logs
from pushengine.app.tap import Options, _choose_log


def lines_of(emit) -> list[dict]:
    out = io.StringIO()
    log = Logger(namespace="pushengine.test", observer=logs.json_observer(out))
    emit(log)
    text = out.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_a_line_is_one_json_object_with_the_events_fields() -> None:
    (record,) = lines_of(lambda log: log.info("answering {path} took\n{ms} ms",
                                              path="/api/jsonrpc", ms=1.5))
    assert record["level"] == "info" and record["namespace"] == "pushengine.test"
    assert record["message"] == "answering /api/jsonrpc took\n1.5 ms"
    assert record["path"] == "/api/jsonrpc" and record["ms"] == 1.5
    assert record["time"].endswith("Z") and "T" in record["time"]


def test_an_error_carries_its_traceback_and_odd_values_are_not_fatal() -> None:
    def emit(log: Logger) -> None:
        try:
            1 / 0
        except ZeroDivisionError:
            log.failure("it failed for {who}", Failure(), who=object(), big="x" * 5000)
    (record,) = lines_of(emit)
    assert record["level"] == "critical"
    assert "ZeroDivisionError" in record["traceback"]
    assert "who" not in record                      # not a plain value
    assert len(record["big"]) == logs.MAX_FIELD
    (warn,) = lines_of(lambda log: log.emit(LogLevel.warn, "w"))
    assert warn["level"] == "warn"


class Server(dict):
    """twistd's own options, as the plugin's options see them (``parent``)."""


def options(*argv: str, **server: object) -> Options:
    o = Options(environ={})
    o.parseOptions(list(argv))
    o.parent = Server(server)       # type: ignore[attr-defined]
    return o


def test_json_sets_the_applications_observer_writing_where_twistd_would(tmp_path) -> None:
    path = tmp_path / "node.log"
    service = logs.NodeServices()
    _choose_log(options("--log-format", "json", logfile=str(path), nodaemon=True), service)
    application = Application("pushengine")
    service.setServiceParent(application)
    observer = application.getComponent(ILogObserver)
    assert observer is service.log_observer is not None
    Logger(namespace="t", observer=observer).info("hello {x}", x=1)
    observer._outFile.flush()                       # (a LogFile)
    assert json.loads(path.read_text())["message"] == "hello 1"


def test_text_leaves_twistd_alone() -> None:
    service = logs.NodeServices()
    _choose_log(options(logfile="x.log"), service)
    application = Application("pushengine")
    service.setServiceParent(application)
    assert application.getComponent(ILogObserver, None) is None


def test_stdout_for_a_dash_or_no_daemon_without_a_file() -> None:
    import sys
    assert logs.twistd_log_file(Server(logfile="-", nodaemon=True)) is sys.stdout
    assert logs.twistd_log_file(Server(logfile=None, nodaemon=True)) is sys.stdout


def test_json_and_syslog_do_not_mix() -> None:
    with pytest.raises(SystemExit, match="syslog"):
        _choose_log(options("--log-format", "json", syslog=True), logs.NodeServices())


def test_log_format_is_checked() -> None:
    from twisted.python import usage
    with pytest.raises(usage.UsageError, match="text or json"):
        Options(environ={}).parseOptions(["--log-format", "xml"])
    o = Options(environ={"PUSHENGINE_LOG_FORMAT": "json"})
    o.parseOptions([])
    assert o["log-format"] == "json"

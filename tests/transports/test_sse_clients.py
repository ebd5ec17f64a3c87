"""Python's SSE clients read the event stream of ``twistd -n pushengine``
(SPEC section 17): every message they hand on is an event with data (no
empty first message), and the retry value reaches them with the first one."""
from __future__ import annotations

import http.client
import json

import httpx
import pytest
import sseclient
from httpx_sse import connect_sse

from tests.e2e.conftest import start
from tests.transports.test_streams_process import stream

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    e = start(tmp_path_factory.mktemp("sse-clients"))
    yield e
    e.stop()


def session_with_events(engine, first: int) -> str:
    sid = engine.call("session.create")
    engine.call("stream.subscribe_public_live", sid, 10)
    engine.publish(stream(first), stream(first + 1))
    return sid


def test_httpx_sse_sees_events_only_each_with_json_data_and_the_retry(engine) -> None:
    sid = session_with_events(engine, 1)
    got = []
    with httpx.Client(timeout=10) as client:
        with connect_sse(client, "GET", f"{engine.base}/api/events",
                         params={"session": sid}) as source:
            for message in source.iter_sse():
                got.append(message)
                if len(got) == 2:
                    break
    assert [json.loads(m.data)["seq"] for m in got] == [1, 2]     # json.loads each: no empty one
    assert [m.id for m in got] == ["1", "2"]
    assert got[0].retry == 3000


def test_sseclient_py_sees_the_retry_value_and_every_event(engine) -> None:
    sid = session_with_events(engine, 11)
    conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=10)
    conn.request("GET", f"/api/events?session={sid}")
    response = conn.getresponse()
    assert response.status == 200
    client = sseclient.SSEClient(response)
    got = []
    for event in client.events():
        got.append(event)
        if len(got) == 2:
            break
    conn.close()
    assert [json.loads(e.data)["seq"] for e in got] == [1, 2]
    assert str(got[0].retry) == "3000"

"""Smoke runs of the benchmark suite: the scripts in bench/ must keep working.

Each scenario runs with a handful of sessions for a couple of seconds through
``bench/driver.py``'s ``run_one`` (the server as a subprocess, the load
generator as another): nothing may be lost or duplicated. Fan-out and held
sessions run over long-polling, SSE and WebSocket. The nchan runs need
the Debian packages nginx and libnginx-mod-nchan; the AMQP run needs RabbitMQ
and pika.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import driver  # noqa: E402
import loadgen  # noqa: E402
import nchan as nchan_bench  # noqa: E402
import scenarios  # noqa: E402
from tests.services import require_program, require_service, unavailable  # noqa: E402

pytestmark = pytest.mark.e2e

SMOKE = {(r.group, r.target, r.transport): r for r in scenarios.suite("smoke")}
RESULTS: dict[tuple[str, str, str], dict] = {}


def run(group: str, target: str, transport: str = "longpoll") -> dict:
    key = (group, target, transport)
    if key not in RESULTS:
        RESULTS[key] = driver.run_one(SMOKE[key], quiet=True)
    r = RESULTS[key]
    assert "error" not in r, r
    return r


def assert_delivered(r: dict) -> None:
    lg = r["loadgen"]
    assert lg["errors"] == {}, lg["errors"]
    assert lg["connected"] == r["sessions"]
    assert lg["published"] > 0 and lg["expected"] > 0
    assert lg["lost"] == 0 and lg["gap_events"] == 0, lg
    assert lg["duplicates"] == 0
    assert lg["events"] == lg["expected"]
    assert lg["latency"]["count"] == lg["events"]
    assert 0 < lg["latency"]["p50"] <= lg["latency"]["p99"] <= lg["latency"]["max"] < 5


def assert_held_streams(r: dict) -> None:
    lg = r["loadgen"]
    assert lg["errors"] == {}, lg["errors"]
    h = lg["held"]
    assert h["open"] == lg["connected"] == r["sessions"] and h["closed"] == 0, h
    assert r["held_ok"] and r["rss_held_kb"] > 0


def assert_held(r: dict) -> None:
    lg = r["loadgen"]
    assert lg["errors"] == {}, lg["errors"]
    h = lg["held"]
    assert h["answered"] == h["on_time"] == r["sessions"], h
    assert r["bytes_per_session"] is not None and r["rss_held_kb"] > 0


def require_nchan() -> None:
    require_program("nginx")
    missing = nchan_bench.available()
    if missing:
        unavailable(missing)


# -- pieces of the load generator, no server -----------------------------------


def test_histogram_percentiles():
    h = loadgen.Histogram()
    for ms in range(1, 1001):
        h.add(ms / 1000)
    s = h.summary()
    assert s["count"] == 1000 and s["max"] == 1.0
    assert s["p50"] == pytest.approx(0.5, rel=0.03)
    assert s["p99"] == pytest.approx(0.99, rel=0.03)
    other = loadgen.Histogram.from_dict(json.loads(json.dumps(h.to_dict())))
    other.merge(h)
    assert other.count == 2000 and other.percentile(50) == pytest.approx(0.5, rel=0.03)


def test_http_parser_chunked_pipelined_and_split():
    async def go():
        conn = loadgen.HttpConn()

        class Transport:
            def write(self, data):
                pass

            def is_closing(self):
                return False
        conn.transport = Transport()
        first, second = conn.request(b"x"), conn.request(b"y")
        wire = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
                b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nEtag: 3\r\n\r\n")
        for i in range(0, len(wire), 7):   # arrives in small pieces
            conn.data_received(wire[i:i + 7])
        a, b = await first, await second
        assert (a.status, a.body) == (200, b"hello world")
        assert (b.status, b.body, b.headers[b"etag"]) == (408, b"", b"3")
    asyncio.run(go())


def test_event_parsing_fast_and_slow_paths_agree():
    body = (b'{"jsonrpc":"2.0","result":['
            b'{"seq":1,"key":"K","action":"update","obj":{"id":1,"n":5,"sent_at":1.5},'
            b'"old":{"id":1,"n":4,"sent_at":1.0}},'
            b'{"seq":2,"key":"K","action":"ping"},'
            b'{"seq":3,"key":"K","action":"reset","obj":[{"id":1,"n":7,"sent_at":2.5}]}'
            b'],"id":1}')
    fast = loadgen.EVENT_RE.findall(body)
    assert fast == loadgen.Session._slow(body)
    assert [m[4] for m in fast] == [b"5", b"", b"7"]


def test_scenarios_build_loadgen_arguments():
    runs = scenarios.suite("full") + scenarios.suite("smoke") + scenarios.suite("targets")
    for run_ in runs:
        cfg = loadgen.make_config(run_.loadgen_args("http://127.0.0.1:1"))
        assert cfg["sessions"] == run_.sessions and cfg["mode"] == run_.group
        assert cfg["transport"] == run_.transport
    names = {(r.name, r.target) for r in runs}
    assert ("fanout-ws-10000-10/s", "nchan") in names
    assert ("fanout-sse-10000-10/s", "pushengine") in names
    assert ("fanout-1000-10/s", "pushengine") in names   # long-poll names unchanged
    assert scenarios.max_held() <= 20_000


def test_websocket_frames_masked_and_parsed():
    frame = loadgen.ws_frame(b'{"jsonrpc":"2.0"}' * 20)   # 340 bytes: 16-bit length
    assert frame[0] == 0x81 and frame[1] == 0x80 | 126
    n = int.from_bytes(frame[2:4], "big")
    mask, payload = frame[4:8], frame[8:]
    assert n == len(payload) == 340
    assert bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) == b'{"jsonrpc":"2.0"}' * 20
    pongs = []
    p = loadgen.WsParser(pongs.append)
    big = b"x" * 70_000
    wire = (b"\x81\x05hello" + b"\x01\x03abc" + b"\x89\x02hi" + b"\x80\x03def"
            + b"\x81\x7f" + len(big).to_bytes(8, "big") + big + b"\x88\x02\x03\xe8")
    got = []
    for i in range(0, len(wire), 1000):   # arrives in pieces
        got += p.feed(wire[i:i + 1000])
    assert got == [b"hello", b"abcdef", big]
    assert pongs == [b"hi"] and p.closed == 1000


def test_chunked_stream_decoded_in_pieces():
    parts = [b"retry: 3000\n\n", b'id: 1\ndata: {"seq":1}\n\n', b"x" * 300]
    wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    c = loadgen.ChunkParser()
    out = b"".join(c.feed(wire[i:i + 3]) for i in range(0, len(wire), 3))
    assert out == b"".join(parts) and c.ended


def test_stream_subscriber_counts_events_gaps_and_duplicates():
    cfg = loadgen.make_config(["--mode", "fanout", "--transport", "sse", "--sessions", "1"])
    w = loadgen.Worker(cfg, range(1), None)
    s = loadgen.StreamSubscriber(w, 0)
    base = cfg["n_base"]

    def event(seq: int, n: int) -> bytes:
        return (b'id: %d\ndata: {"seq":%d,"key":"V","action":"update","obj":{"id":1,"n":%d,'
                b'"sent_at":%r},"old":{"id":1,"n":0,"sent_at":0.0}}\n\n'
                % (seq, seq, n, 1.0))
    wire = b"retry: 3000\n\n" + event(1, base + 1) + event(2, base + 3) + b": ping\n\n"
    wire += event(3, base + 3)
    for i in range(0, len(wire), 50):
        s.feed(wire[i:i + 50], 2.0)
    st = w.stats
    assert (st.events, st.gap_events, st.duplicates, st.pings) == (2, 1, 1, 1)
    assert w.hist.count == 2 and abs(w.hist.max - 1.0) < 0.05


# -- round trips against the engine -------------------------------------------


def test_engine_held_polls_answered_at_their_timeout():
    assert_held(run("held", "pushengine"))


def test_engine_fanout_loses_nothing():
    r = run("fanout", "pushengine")
    assert_delivered(r)
    assert r["loadgen"]["answers_per_s"] > 0 and r["cpu_pct"] is not None
    assert r["metrics_end"]["pushengine_changes_total"] >= r["loadgen"]["published"]


def test_engine_answers_with_events_waiting():
    r = run("answers", "pushengine")
    lg = r["loadgen"]
    assert lg["errors"] == {} and lg["empty_answers"] == 0
    assert lg["answers"] > 0 and lg["answers_per_s"] > 0 and lg["answer_bytes"] > 100


def test_engine_per_user_views_lose_nothing():
    r = run("users", "pushengine")
    assert_delivered(r)
    assert r["loadgen"]["expected"] == r["loadgen"]["published"]  # one subscriber per user


def test_engine_amqp_ingest_loses_nothing():
    require_service("RabbitMQ", "127.0.0.1", 5672)
    pytest.importorskip("pika")
    why = driver.amqp_unavailable()
    if why:
        pytest.skip(why)
    assert_delivered(run("amqp", "pushengine"))


@pytest.mark.parametrize("transport", scenarios.STREAMS)
def test_engine_stream_fanout_loses_nothing(transport):
    r = run("fanout", "pushengine", transport)
    assert_delivered(r)
    assert r["loadgen"]["transport"] == transport
    assert r["events_per_cpu_s"] is not None and r["events_per_cpu_s"] > 0


def test_engine_held_streams_stay_open():
    assert_held_streams(run("held", "pushengine", "ws"))


# -- nchan, the peer ----------------------------------------------------------------


def test_nchan_held_polls_answered_at_their_timeout():
    require_nchan()
    assert_held(run("held", "nchan"))


def test_nchan_fanout_loses_nothing():
    require_nchan()
    assert_delivered(run("fanout", "nchan"))


@pytest.mark.parametrize("transport", scenarios.STREAMS)
def test_nchan_stream_fanout_loses_nothing(transport):
    require_nchan()
    assert_delivered(run("fanout", "nchan", transport))


# -- reporting ----------------------------------------------------------------------


def test_report_comparison_and_plot(tmp_path):
    results = [run("held", "pushengine"), run("fanout", "pushengine"),
               run("fanout", "pushengine", "ws")]
    if ("fanout", "nchan", "longpoll") in RESULTS:
        results += [RESULTS[("held", "nchan", "longpoll")],
                    RESULTS[("fanout", "nchan", "longpoll")]]
    if ("fanout", "nchan", "ws") in RESULTS:
        peer = RESULTS[("fanout", "nchan", "ws")]
        results.append(peer)
        rows = {row["name"]: row for row in driver.compare(results)}
        # 20 sessions may cost a server less than one 10 ms tick of /proc's CPU
        # count: a ratio is given exactly when both sides were measurable
        measured = bool(results[2].get("events_per_cpu_s") and peer.get("events_per_cpu_s"))
        assert ("events/CPU-s" in rows["fanout-ws-20-20/s"]["ratio"]) == measured
    rows = driver.compare(results)
    assert {row["name"] for row in rows} == {"held-20", "fanout-20-20/s", "fanout-ws-20-20/s"}
    for r in results:
        assert driver.describe(r)
    driver.print_comparison(rows)
    pytest.importorskip("matplotlib")
    import plot
    doc = {"machine": driver.machine(), "runs": results}
    out = plot.plot(doc, str(tmp_path / "p.png"))
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # the streaming figure: a second size of the WebSocket fan-out makes a line
    more = dict(results[2], sessions=40, name="fanout-ws-40-20/s")
    out = plot.plot_streaming({"machine": doc["machine"], "runs": results + [more]},
                              str(tmp_path / "s.png"))
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_comparison_gives_a_ratio_for_every_figure_both_sides_have():
    def result(target, per_cpu, p99):
        return {"target": target, "group": "fanout", "transport": "ws", "sessions": 20,
                "subs": 1, "rate": 20.0, "batch": 1, "name": "fanout-ws-20-20/s",
                "cpu_pct": 50.0, "events_per_cpu_s": per_cpu,
                "loadgen": {"latency": {"p50": 0.1, "p99": p99, "max": 0.3}, "lost": 0,
                            "answers_per_s": 400.0, "events_per_s": 400.0,
                            "publish_rate": 20.0}}
    rows = driver.compare([result("pushengine", 30_000.0, 0.2), result("nchan", 60_000.0, 0.1)])
    assert rows[0]["ratio"]["events/CPU-s"] == 0.5 and rows[0]["ratio"]["p99"] == 2.0
    rows = driver.compare([result("pushengine", None, 0.2), result("nchan", 60_000.0, 0.1)])
    assert "events/CPU-s" not in rows[0]["ratio"] and rows[0]["ratio"]["p99"] == 2.0

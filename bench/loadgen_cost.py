"""The load generator's own CPU per event, no server.

    python bench/loadgen_cost.py [--kind nchan|socketio|pushengine] [--transport ws|sse]
                                 [--streams 1000] [--rounds 300] [--gap 0.03]

A writer process sends ``--rounds`` events to each of ``--streams`` loopback
TCP connections, one frame (or SSE message) per stream per round, ``--gap`` seconds
apart -- as a server fans one change out to every stream -- and one loadgen
worker reads them with its real stream loop (``Worker.stream_loop``: epoll,
``recv_into`` the shared buffer, the bytes walked in place). Prints the
worker's CPU seconds (user and system) per event and per read, and the
events a second one worker could read at ``LOADGEN_BOUND_PCT`` of a core:
above that a run is flagged loadgen-bound. Every event must be counted once.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import loadgen  # noqa: E402


def wire(kind: str, transport: str, n: int, seq: int) -> bytes:
    """What a server sends one stream for the event with this n."""
    if kind == loadgen.PUSHENGINE:
        event = (b'{"seq":%d,"key":"public_live:1","action":"update","obj":{"id":1,"n":%d,'
                 b'"sent_at":%r,"user_id":-1,"live":true,"public":true,'
                 b'"created_at":"2030-01-01T00:00:00Z"},"old":{"id":1,"n":%d,"sent_at":%r,'
                 b'"user_id":-1,"live":true,"public":true,"created_at":"2030-01-01T00:00:00Z"}}'
                 % (seq, n, time.time(), n - 1, time.time()))
        payload = b'{"jsonrpc":"2.0","method":"events","params":[' + event + b"]}"
        sse = b"id: %d\ndata: %s\n\n" % (seq, event)
    else:
        payload = loadgen.peer_message(n, time.time())
        sse = b"id: %d\ndata: %s\n\n" % (seq, payload)
        if kind == loadgen.SOCKETIO:
            payload = b'42["m",' + payload + b"]"
    if transport == "sse":
        return sse
    size = len(payload)
    head = bytes((0x81, size)) if size < 126 else b"\x81\x7e" + size.to_bytes(2, "big")
    return head + payload


def tcp_pairs(count: int) -> list[tuple[socket.socket, socket.socket]]:
    """Connected loopback TCP sockets: (the loadgen's end, the server's end)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1024)
        pairs = []
        for _ in range(count):
            mine = socket.create_connection(listener.getsockname())
            theirs, _ = listener.accept()
            pairs.append((mine, theirs))
    return pairs


def writer(pairs: list, kind: str, transport: str, base: int, rounds: int, gap: float,
           done) -> None:
    time.sleep(0.3)
    for k in range(1, rounds + 1):
        data = wire(kind, transport, base + k, k)
        for _, theirs in pairs:
            theirs.sendall(data)
        time.sleep(gap)
    time.sleep(0.3)
    done.send("stop")


def measure(kind: str, transport: str, streams: int, rounds: int, gap: float) -> dict:
    """One worker reading ``streams`` streams for ``rounds`` events each."""
    loadgen.raise_nofile()
    cfg = loadgen.make_config(["--target", kind, "--transport", transport,
                               "--sessions", str(streams), "--report-interval", "1"])
    pairs = tcp_pairs(streams)
    pipe, done = multiprocessing.Pipe()
    w = loadgen.Worker(cfg, range(streams), pipe)
    for i, (mine, _) in enumerate(pairs):
        mine.setblocking(False)
        s = loadgen.subscriber_class(cfg)(w, i)
        s.sock = mine
        s.streaming()
        w.watch(s)
        s.reading = True
    w.report = lambda: setattr(w, "next_report", time.time() + 1)   # no coordinator
    p = multiprocessing.get_context("fork").Process(
        target=writer, args=(pairs, kind, transport, cfg["n_base"], rounds, gap, done))
    p.start()
    before = resource.getrusage(resource.RUSAGE_SELF)
    w.stream_loop()
    after = resource.getrusage(resource.RUSAGE_SELF)
    p.join()
    w.snapshot()
    for mine, theirs in pairs:
        mine.close()
        theirs.close()
    user = after.ru_utime - before.ru_utime
    system = after.ru_stime - before.ru_stime
    st = w.stats
    events = max(1, st.events)
    per_event = (user + system) / events
    return {"kind": kind, "transport": transport, "streams": streams, "events": st.events,
            "expected": streams * rounds, "reads": st.answers, "duplicates": st.duplicates,
            "gap_events": st.gap_events, "errors": st.errors, "latencies": w.hist.count,
            "user_s": user, "system_s": system, "us_per_event": 1e6 * per_event,
            "us_per_read": 1e6 * (user + system) / max(1, st.answers),
            "events_per_s_at_bound": loadgen.LOADGEN_BOUND_PCT / 100 / per_event}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=list(loadgen.TARGETS), default=loadgen.NCHAN)
    p.add_argument("--transport", choices=["ws", "sse"], default="ws")
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--gap", type=float, default=0.03, help="seconds between rounds")
    a = p.parse_args(argv)
    r = measure(a.kind, a.transport, a.streams, a.rounds, a.gap)
    print(f"{r['kind']} {r['transport']}: {r['events']:,} of {r['expected']:,} events in"
          f" {r['reads']:,} reads (duplicates {r['duplicates']}, gaps {r['gap_events']},"
          f" errors {r['errors'] or 'none'}) | CPU {r['user_s']:.2f} s user +"
          f" {r['system_s']:.2f} s system = {r['us_per_event']:.2f} us/event,"
          f" {r['us_per_read']:.2f} us/read | one worker at"
          f" {loadgen.LOADGEN_BOUND_PCT:.0f} % of a core reads"
          f" {r['events_per_s_at_bound']:,.0f} events/s")


if __name__ == "__main__":
    main()

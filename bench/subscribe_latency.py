"""Other clients' latency while one client makes many new subscriptions.

    python bench/subscribe_latency.py [--streams 100000] [--calls 50]
                                      [--method near|user|word|near-world|similar ...]

Starts ``twistd -n pushengine --seed FILE`` on a free port with ``--streams``
demo-like streams (six cities, users 1..5000), then for each method: one
client sends one JSON-RPC batch of ``--calls`` subscriptions with distinct
parameters while a second client polls ``GET /health`` on its own keep-alive
connection. Prints the p50/p99/max of the /health latencies measured while
the batch was pending and the time the batch took to answer. SPEC section 12
asks for other requests answered within 100 ms.

``near`` asks for places in the cities (a dense cell: scanned in slices),
``user`` for users' streams (from the equality index), ``word`` for title
words (a scan of every stream), ``near-world`` for circles around the whole
globe (a scan of every stream, the hostile case), ``similar`` for titles
like a text of two or three of the seed's words (MinHash LSH candidates,
thousands per text, checked exactly). The engine is the checkout
this file is in (PYTHONPATH), not an installed copy.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from math import asin, cos, radians, sin, sqrt
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PLACES = [(55.7558, 37.6173), (59.9343, 30.3351), (56.8389, 60.6057), (51.5072, -0.1276),
          (52.5200, 13.4050), (40.7128, -74.0060)]
WORDS = ["кошки", "котик", "собака", "музыка", "концерт", "футбол", "игра", "новости",
         "погода", "кухня", "рецепт", "cats", "kitten", "dogs", "music", "football",
         "gaming", "news", "cooking", "travel", "live", "стрим", "город", "дорога"]
BASE_TIME = 1_767_225_600   # 2026-01-01T00:00:00Z
METHODS = ("near", "user", "word", "near-world", "similar")


# -- the seed --------------------------------------------------------------------

def make_streams(count: int, seed: int = 1) -> list[dict]:
    """Demo-like public streams: one of six cities (±0.2°), users 1..5000."""
    rng = random.Random(seed)
    streams = []
    for i in range(1, count + 1):
        lat, lon = rng.choice(PLACES)
        streams.append({
            "id": i, "title": " ".join(rng.sample(WORDS, rng.randint(2, 4))).capitalize(),
            "user_id": rng.randint(1, 5000), "live": rng.random() < 0.3, "public": True,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                        time.gmtime(BASE_TIME + rng.randrange(10**7))),
            "lat": round(lat + rng.uniform(-0.2, 0.2), 4),
            "lon": round(lon + rng.uniform(-0.2, 0.2), 4),
            "viewers": rng.randint(0, 5000)})
    return streams


def write_seed(path: Path, streams: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for obj in streams:
            f.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
            f.write("\n")


# -- the calls and their brute-force answers ----------------------------------------

def batch_params(method: str, calls: int, limit: int = 10, seed: int = 2) -> list[list]:
    """Distinct parameters (without the session id) for ``calls`` subscriptions."""
    rng = random.Random(seed)
    out: list[list] = []
    if method == "near":
        for i in range(calls):
            lat, lon = PLACES[i % len(PLACES)]
            out.append([round(lat + rng.uniform(-0.1, 0.1), 5),
                        round(lon + rng.uniform(-0.1, 0.1), 5), rng.choice([5, 10, 20, 30]),
                        limit])
    elif method == "near-world":
        out = [[round(-80 + 160 * i / calls, 4), 0.0, 20000, limit] for i in range(calls)]
    elif method == "user":
        out = [[u, limit] for u in rng.sample(range(1, 5001), calls)]
    elif method == "similar":
        # titles-like texts of two or three of the seed's words: each shares
        # LSH bands with thousands of stored titles (the costly case)
        texts: set[str] = set()
        while len(texts) < calls:
            texts.add(" ".join(rng.sample(WORDS, rng.randint(2, 3))))
        out = [[t, limit] for t in sorted(texts)]
    elif method == "word":
        words = ["кошка", "котик", "собаки", "музыке", "концерта", "футбол", "игры", "новость",
                 "погоду", "кухни", "рецепты", "cat", "kittens", "dog", "musical", "footballs",
                 "game", "news", "cook", "travels", "living", "стримы", "города", "дороги"]
        out = [[w, limit] for w in words[:calls]]
    else:
        raise ValueError(method)
    return out


def rpc_method(method: str) -> str:
    return {"near": "stream.subscribe_near", "near-world": "stream.subscribe_near",
            "user": "stream.subscribe_user", "word": "stream.subscribe_word",
            "similar": "stream.subscribe_similar"}[method]


def distance_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = radians(lat1), radians(lat2)
    dp, dl = p2 - p1, radians(lon2 - lon1)
    h = sin(dp / 2) ** 2 + cos(p1) * cos(p2) * sin(dl / 2) ** 2
    return 2 * 6371.0088 * asin(min(1.0, sqrt(h)))


def newest_first(objs: list[dict]) -> list[dict]:
    return sorted(objs, key=lambda o: (o["created_at"], o["id"]), reverse=True)


def brute(method: str, streams: list[dict], params: list) -> list[dict]:
    """The initial state a subscription must get, the slow way."""
    if method in ("near", "near-world"):
        lat, lon, km, limit = params
        found = [o for o in streams if o.get("public") is True
                 and distance_km(lat, lon, o["lat"], o["lon"]) <= km]
    elif method == "user":
        user, limit = params
        found = [o for o in streams if o.get("public") is True and o["user_id"] == user]
    elif method == "similar":
        text, limit = params
        wanted = word_set(text)
        scored = []
        for o in streams:
            if o.get("public") is True and o.get("live") is True:
                have = word_set(o["title"])
                j = len(wanted & have) / len(wanted | have)
                if j >= 0.5:
                    scored.append((j, o["id"], o))
        scored.sort(key=lambda t: (t[0], t[1]), reverse=True)
        return [o for _, _, o in scored[:limit]]
    else:
        raise ValueError(method)
    return newest_first(found)[:limit]


def word_set(text: str) -> set[str]:
    """Lower-cased words split on every character that is not a letter or a
    digit (SPEC section 13)."""
    return {w for w in "".join(c if c.isalnum() else " " for c in text.lower()).split()}


# -- the measurement ----------------------------------------------------------------

def post(base: str, value: Any, timeout: float = 300) -> Any:
    req = urllib.request.Request(base + "/api/jsonrpc", json.dumps(value).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class HealthPoller(threading.Thread):
    """GET /health in a loop on one keep-alive connection: (start, seconds)."""

    def __init__(self, host: str, port: int, pause: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.host, self.port, self.pause = host, port, pause
        self.samples: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        while not self.stopping.is_set():
            start = time.perf_counter()
            try:
                conn.request("GET", "/health")
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    self.errors.append(f"HTTP {response.status}")
            except (OSError, http.client.HTTPException) as e:
                self.errors.append(repr(e))
                conn.close()
                conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                continue
            self.samples.append((start, time.perf_counter() - start))
            time.sleep(self.pause)
        conn.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def measure(base: str, method: str, params: list[list], timeout: float = 300) -> dict:
    """One session, one batch of subscriptions, /health polled meanwhile."""
    sid = post(base, {"jsonrpc": "2.0", "method": "session.create", "id": 0})["result"]
    batch = [{"jsonrpc": "2.0", "method": rpc_method(method), "params": [sid, *p], "id": i}
             for i, p in enumerate(params, 1)]
    host, port = base.split("//", 1)[1].rsplit(":", 1)
    poller = HealthPoller(host, int(port))
    poller.start()
    time.sleep(0.2)                      # a few samples before, as a baseline
    sent = time.perf_counter()
    answers = post(base, batch, timeout)
    answered = time.perf_counter()
    time.sleep(0.1)
    poller.stop()
    # every request that was pending at some moment while the batch was
    during = [s for t, s in poller.samples if t <= answered and t + s >= sent]
    before = [s for t, s in poller.samples if t < sent]
    by_id = {a.get("id"): a for a in answers} if isinstance(answers, list) else {}
    return {"method": method, "calls": len(batch), "sid": sid,
            "batch_seconds": answered - sent,
            "health_samples": len(during), "health_errors": poller.errors,
            "p50_ms": percentile(during, 50) * 1000, "p99_ms": percentile(during, 99) * 1000,
            "max_ms": max(during, default=float("nan")) * 1000,
            "idle_p50_ms": percentile(before, 50) * 1000,
            "answers": [by_id.get(i) for i in range(1, len(batch) + 1)]}


# -- running it by hand ---------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_engine(workdir: str, seed: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    twistd = shutil.which("twistd", path=os.path.dirname(sys.executable)) or "twistd"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([twistd, "-n", "--pidfile=", f"--logfile={workdir}/engine.log",
                             "pushengine", "--port", f"tcp:{port}:interface=127.0.0.1",
                             "--seed", str(seed), *extra],
                            cwd=workdir, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the engine exited with {proc.returncode}; see {workdir}/engine.log")
        try:
            urllib.request.urlopen(base + "/health", timeout=1).read()
            return proc, base
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the engine did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--method", action="append", choices=METHODS,
                        help="repeatable; default: near, user, word")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    methods = args.method or ["near", "user", "word"]
    with tempfile.TemporaryDirectory(prefix="pushengine-subscribe-") as tmp:
        seed = Path(tmp) / "seed.jsonl"
        streams = make_streams(args.streams)
        write_seed(seed, streams)
        started = time.perf_counter()
        proc, base = start_engine(tmp, seed, "--max-subscriptions", str(max(50, args.calls)))
        print(f"{args.streams} streams seeded; the engine answered after "
              f"{time.perf_counter() - started:.1f} s")
        results = []
        try:
            for method in methods:
                params = batch_params(method, args.calls)
                r = measure(base, method, params)
                bad = [a for a in r["answers"] if not a or "result" not in a]
                if method in ("near", "user", "near-world", "similar"):
                    key, state = r["answers"][0]["result"]
                    ok = [o["id"] for o in state] == \
                        [o["id"] for o in brute(method, streams, params[0])]
                else:
                    ok = True
                print(f"{method:>10}: {r['calls']} calls answered in {r['batch_seconds']:.2f} s"
                      f"{' (' + str(len(bad)) + ' failed)' if bad else ''}"
                      f"{'' if ok else ' WRONG STATE'}; /health during it: "
                      f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
                      f"max {r['max_ms']:.1f} ms over {r['health_samples']} requests "
                      f"(idle p50 {r['idle_p50_ms']:.1f} ms)")
                r.pop("answers")
                results.append(r)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        if args.json:
            print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""Real nodes (twistd): two nodes with Redis see one segment, uploaded with
``pushengine-segment`` through the HTTP front (streamed, above --max-body);
a targeted object reaches exactly the segment's sessions on both nodes; and
an upload of 1,000,000 rows, timed, with the node's memory bounded."""
from __future__ import annotations

import io
import os
import time
import uuid

import jwt
import pytest

from pushengine.tools.segment_cli import main as segment_cli
from tests.e2e.conftest import start
from tests.services import require_service

pytestmark = [pytest.mark.e2e]

SECRET = "segment-node-test-secret-of-enough-length"
SEGMENT_DB = int(os.environ.get("PUSHENGINE_SEGMENT_REDIS_DB", "9"))
VIEWS = """
types: {Offer: {id: id}}
views:
  OfferView:
    type: Offer
    method: offer.subscribe
    where: {audience: $session.segments}
    order: id
"""


def write_contacts(path, rows: int) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("phone,email,name\n")
        for i in range(rows):
            f.write(f"7999{i:07d},user{i}@example.com,Имя {i}\n")


def cli(node, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = segment_cli(["--url", node.base, *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def token(sub: str, **claims) -> str:
    return jwt.encode({"sub": sub, **claims}, SECRET, algorithm="HS256")


@pytest.fixture
def two_nodes(tmp_path):
    require_service("Redis", "127.0.0.1", 6379)
    views = tmp_path / "views.yaml"
    views.write_text(VIEWS)
    prefix = f"segtest{uuid.uuid4().hex[:10]}:"
    url = f"redis://127.0.0.1:6379/{SEGMENT_DB}?prefix={prefix}"
    nodes = []
    for i in range(2):
        (tmp_path / f"n{i}").mkdir()
        nodes.append(start(tmp_path / f"n{i}", "--redis", url, "--views", str(views),
                           "--secret", SECRET, "--segment-min", "5", "--max-body", "65536"))
    yield nodes
    for n in nodes:
        n.stop()
    from tests.cluster.resp import Resp
    with Resp("127.0.0.1", 6379, SEGMENT_DB) as r:
        keys = r("KEYS", prefix + "*")
        if keys:
            r("DEL", *keys)


def test_two_nodes_with_redis_see_one_segment(two_nodes, tmp_path):
    a, b = two_nodes
    path = tmp_path / "contacts.csv"
    write_contacts(path, 5000)            # ~200 KB: above --max-body, streamed
    assert os.path.getsize(path) > 65536
    code, out, err = cli(a, "upload", str(path), "--name", "vip", "--progress")
    assert code == 0, err
    assert '"valid": 10000' in out and "100.0%" in err
    code, out, _ = cli(b, "list")
    assert code == 0 and out.startswith("vip\t10000 entries")
    # sessions on both nodes; members by phone or email
    sids = {}
    for node, name, claims in [(a, "a-in", {"phone": "+7 999 000 00 07"}),
                               (b, "b-in", {"email": "USER42@example.com"}),
                               (a, "a-out", {"phone": "79990000001"}),
                               (b, "b-out", {"email": "someone@else.org"})]:
        sid = node.call("session.create")
        node.call("session.authorize", sid, token(name, **claims))
        sids[name] = (node, sid)
    # a-out's phone is in the file too: it is a member
    for name, (node, sid) in sids.items():
        node.call("session.subscribe", sid, "OfferView", {}, 10)
    # no --amqp here: each node has its own in-process feed, the change goes to both
    for node in (a, b):
        node.publish({"type": "Offer", "action": "upsert",
                      "obj": {"id": 1, "public": True, "audience": "vip"}})
    got = {}
    for name, (node, sid) in sids.items():
        deadline = time.monotonic() + 5
        events = []
        while time.monotonic() < deadline and not events:
            events = node.call("session.get_events", sid, 1)
        got[name] = [e["obj"]["id"] for e in events if e["action"] == "insert"]
    assert got == {"a-in": [1], "b-in": [1], "a-out": [1], "b-out": []}
    # deleted on b: gone for a as well
    assert cli(b, "delete", "vip")[0] == 0
    assert cli(a, "list")[1] == ""
    code, _, err = cli(a, "delete", "vip")
    assert code == 1 and "not_found" in err


def test_errors_through_the_cli(two_nodes, tmp_path):
    a, _ = two_nodes
    path = tmp_path / "bad.csv"
    path.write_bytes(b"phone;email\n79995551111;a@b.ru\n")
    code, _, err = cli(a, "upload", str(path), "--name", "x")
    assert code == 1 and "header_validation" in err and "line 1" in err


def test_an_upload_of_a_million_rows(tmp_path):
    views = tmp_path / "views.yaml"
    views.write_text(VIEWS)
    (tmp_path / "big").mkdir()
    node = start(tmp_path / "big", "--views", str(views))
    try:
        path = tmp_path / "million.csv"
        write_contacts(path, 1_000_000)
        size = os.path.getsize(path)
        before = rss_kib(node.process.pid)
        started = time.monotonic()
        code, out, err = cli(node, "upload", str(path), "--name", "big")
        seconds = time.monotonic() - started
        assert code == 0, err
        assert '"valid": 2000000' in out
        peak = rss_kib(node.process.pid)
        print(f"\n1,000,000 rows ({size >> 20} MiB) in {seconds:.1f} s: "
              f"{1_000_000 / seconds:,.0f} rows/s; node peak RSS {before >> 10} -> "
              f"{peak >> 10} MiB")
        # the in-process segment holds 2,000,000 digests (~200 MiB of Python
        # objects); the file itself (~50 MiB) is never read whole on top of it
        assert peak - before < 400 * 1024
    finally:
        node.stop()


def test_an_upload_on_one_node_moves_sessions_subscribed_on_the_other(two_nodes, tmp_path):
    a, b = two_nodes
    sid = b.call("session.create")
    b.call("session.authorize", sid, token("member", phone="79990000007"))
    key, state = b.call("session.subscribe", sid, "OfferView", {}, 10)
    b.publish({"type": "Offer", "action": "upsert",
               "obj": {"id": 1, "public": True, "audience": "vip"}})
    assert state == [] and b.call("session.get_events", sid, 0) == []
    path = tmp_path / "contacts.csv"
    write_contacts(path, 10)
    assert cli(a, "upload", str(path), "--name", "vip")[0] == 0
    # b reads the segments' versions every second
    events = b.call("session.get_events", sid, 5)
    assert [(e["key"], e["action"], e["obj"]["id"]) for e in events] == [(key, "insert", 1)]
    assert cli(a, "delete", "vip")[0] == 0
    events = b.call("session.get_events", sid, 5)
    assert [(e["key"], e["action"], e["obj"]["id"]) for e in events] == [(key, "delete", 1)]


@pytest.mark.parametrize("front", ["fast", "twisted"])
def test_an_upload_without_the_key_is_refused_before_its_body(tmp_path, front):
    import json
    import socket
    from urllib.parse import urlsplit
    (tmp_path / "n").mkdir()
    node = start(tmp_path / "n", "--publish-key", "s3cret", "--http", front)
    try:
        where = urlsplit(node.base)
        for auth, status in [(b"", b"401"), (b"Authorization: Bearer wrong\r\n", b"401")]:
            with socket.create_connection((where.hostname, where.port), timeout=5) as s:
                # 1 GiB announced, not a byte of it sent: the answer comes anyway
                s.sendall(b"POST /api/segments/vip HTTP/1.1\r\nHost: x\r\n" + auth +
                          b"Content-Length: 1073741824\r\nExpect: 100-continue\r\n\r\n")
                data = b""
                while b"}" not in data:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            # no 100 Continue before a final answer, on either front
            assert data.startswith(b"HTTP/1.1 " + status), data
            head, _, body = data.rpartition(b"\r\n\r\n")
            assert b"HTTP/1.1 " + status in head and b"connection: close" in head.lower()
            assert json.loads(body)["error"]["code"] == "not_authorized"
    finally:
        node.stop()


@pytest.mark.parametrize("front", ["fast", "twisted"])
def test_an_upload_with_the_key_gets_100_continue_then_its_answer(tmp_path, front):
    import json
    import socket
    from urllib.parse import urlsplit
    (tmp_path / "n").mkdir()
    node = start(tmp_path / "n", "--publish-key", "s3cret", "--http", front,
                 "--segment-min", "1")
    try:
        where = urlsplit(node.base)
        body = b"phone,email\r\n79995551111,a@example.com\r\n79995551112,b@example.com\r\n"
        with socket.create_connection((where.hostname, where.port), timeout=5) as s:
            s.sendall(b"POST /api/segments/vip HTTP/1.1\r\nHost: x\r\n"
                      b"Authorization: Bearer s3cret\r\nContent-Length: %d\r\n"
                      b"Expect: 100-continue\r\n\r\n" % len(body))
            first = s.recv(4096)
            assert first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), first
            s.sendall(body)
            data = first[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
            s.settimeout(1.0)
            try:
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            except TimeoutError:
                pass
        head, _, answer = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), data
        assert b"100 Continue" not in data              # once, before the body
        text = answer[answer.index(b"{"):answer.rindex(b"}") + 1]    # maybe chunked
        assert json.loads(text)["valid"] == 4, answer
    finally:
        node.stop()

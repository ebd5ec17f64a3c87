"""Real WebSocket clients nobody here wrote against ``twistd -n pushengine``
(SPEC 17): websocket-client, websockets and aiohttp from PyPI, ws from npm
(tests/clients); Chromium is in tests/browser/test_transports.py. Each offers
the subprotocol ``pushengine.jsonrpc`` or permessage-deflate and runs the
whole flow: create a session, subscribe, receive a published change."""
from __future__ import annotations

import asyncio
import json
import threading
import shutil
import socket
import subprocess
import zlib
from pathlib import Path

import pytest

from tests.e2e.conftest import start
from tests.services import unavailable
from tests.transports.wsclient import WsClient


def run_apart(coroutine_function):
    """Run an asyncio client to its end in a thread of its own: the test
    process may already have a running event loop in this thread (a browser
    test's driver), where ``asyncio.run`` refuses to start."""
    result: list = []
    error: list[BaseException] = []

    def main() -> None:
        try:
            result.append(asyncio.run(coroutine_function()))
        except BaseException as e:      # handed back to the test
            error.append(e)
    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    thread.join(120)
    if error:
        raise error[0]
    assert result, "the client did not finish within 120 s"
    return result[0]

pytestmark = pytest.mark.e2e
CLIENTS = Path(__file__).resolve().parents[1] / "clients"


def stream(id_: int) -> dict:
    return {"type": "Stream", "action": "upsert",
            "obj": {"id": id_, "title": f"client stream {id_}", "user_id": 1, "live": True,
                    "public": True, "created_at": "2030-01-01T00:00:00Z"}}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    e = start(tmp_path_factory.mktemp("wsclients"))
    yield e
    e.stop()


def handshake(port: int, *headers: str) -> tuple[int, str, dict[str, str], bytes]:
    """A raw upgrade request: the status, its reason, the headers and the body."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    lines = ["GET /api/ws HTTP/1.1", "Host: 127.0.0.1", "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", *headers]
    if not any(h.lower().startswith("sec-websocket-version") for h in headers):
        lines.append("Sec-WebSocket-Version: 13")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *rest = head.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (r.partition(":") for r in rest)}
    if int(status_line.split()[1]) != 101:
        n = int(fields.get("content-length", "0"))
        while len(body) < n:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    sock.close()
    return int(status_line.split()[1]), status_line.split(" ", 2)[2], fields, body


def test_the_subprotocol_is_answered_when_offered_and_only_then(engine) -> None:
    status, _, fields, _ = handshake(engine.port, "Sec-WebSocket-Protocol: chat, pushengine.jsonrpc")
    assert status == 101 and fields["sec-websocket-protocol"] == "pushengine.jsonrpc"
    status, _, fields, _ = handshake(engine.port, "Sec-WebSocket-Protocol: chat, mqtt")
    assert status == 101 and "sec-websocket-protocol" not in fields


def test_another_version_is_a_426_upgrade_required_naming_13_with_a_json_body(engine) -> None:
    status, reason, fields, body = handshake(engine.port, "Sec-WebSocket-Version: 8")
    assert (status, reason) == (426, "Upgrade Required")
    assert fields["sec-websocket-version"] == "13"
    assert json.loads(body)["error"]["code"] == -32600
    answer = engine.get("/api/ws")
    assert answer.code == 426 and answer.headers["Sec-WebSocket-Version"] == "13"


def test_deflate_is_negotiated_with_the_client_window_respected(engine) -> None:
    status, _, fields, _ = handshake(
        engine.port, "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits")
    assert status == 101
    assert fields["sec-websocket-extensions"] == "permessage-deflate; server_no_context_takeover"
    status, _, fields, _ = handshake(
        engine.port, "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=10")
    assert fields["sec-websocket-extensions"] == \
        "permessage-deflate; server_no_context_takeover; server_max_window_bits=10"
    status, _, fields, _ = handshake(
        engine.port, "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=8, "
                     "permessage-deflate; bogus=1")
    assert status == 101 and "sec-websocket-extensions" not in fields


def test_websocket_client_offering_the_subprotocol_runs_the_flow(engine) -> None:
    websocket = pytest.importorskip("websocket")
    ws = websocket.create_connection(f"ws://127.0.0.1:{engine.port}/api/ws",
                                     subprotocols=["pushengine.jsonrpc"], timeout=10)
    assert ws.getsubprotocol() == "pushengine.jsonrpc"

    def call(id_: int, method: str, *params):
        ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method,
                            "params": list(params)}))
        while True:
            m = json.loads(ws.recv())
            if m.get("id") == id_:
                return m
    sid = call(1, "session.create")["result"]
    key, _ = call(2, "stream.subscribe_public_live", sid, 10)["result"]
    engine.publish(stream(720001))
    while True:
        m = json.loads(ws.recv())
        if m.get("method") == "events" and any(e["obj"]["id"] == 720001 for e in m["params"]):
            break
    assert m["params"][-1]["key"] == key
    ws.close()


def test_websockets_negotiates_deflate_and_decodes_every_event(engine) -> None:
    websockets = pytest.importorskip("websockets")
    from websockets.asyncio.client import connect

    async def flow() -> tuple[str, list[dict]]:
        async with connect(f"ws://127.0.0.1:{engine.port}/api/ws", compression="deflate",
                           subprotocols=["pushengine.jsonrpc"]) as ws:
            extensions = ws.response.headers["Sec-WebSocket-Extensions"]
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.create"}))
            sid = json.loads(await ws.recv())["result"]
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method":
                                      "stream.subscribe_public_live", "params": [sid, 50]}))
            json.loads(await ws.recv())
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: engine.publish(*[stream(730000 + i) for i in range(30)]))
            got: list[dict] = []
            while len([e for e in got if e["obj"]["id"] >= 730000]) < 30:
                m = json.loads(await asyncio.wait_for(ws.recv(), 10))
                got += m["params"]
            return extensions, got
    extensions, events = run_apart(flow)
    assert websockets and extensions.startswith("permessage-deflate")
    assert sorted(e["obj"]["id"] for e in events if e["obj"]["id"] >= 730000) == \
        list(range(730000, 730030))
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_aiohttp_negotiates_deflate_and_decodes_every_event(engine) -> None:
    aiohttp = pytest.importorskip("aiohttp")

    async def flow() -> tuple[str, list[dict]]:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"ws://127.0.0.1:{engine.port}/api/ws", compress=15,
                                       protocols=["pushengine.jsonrpc"]) as ws:
                extensions = ws._response.headers["Sec-WebSocket-Extensions"]
                assert ws.protocol == "pushengine.jsonrpc"
                await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": 1,
                                              "method": "session.create"}))
                sid = (await ws.receive_json())["result"]
                await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": 2, "method":
                                              "stream.subscribe_public_live",
                                              "params": [sid, 50]}))
                await ws.receive_json()
                async with http.post(f"http://127.0.0.1:{engine.port}/api/publish",
                                     json=[stream(740000 + i) for i in range(20)]) as r:
                    assert r.status == 200
                got: list[dict] = []
                while len([e for e in got if e["obj"]["id"] >= 740000]) < 20:
                    got += (await ws.receive_json(timeout=10))["params"]
                return extensions, got
    extensions, events = run_apart(flow)
    assert extensions.startswith("permessage-deflate")
    assert sorted(e["obj"]["id"] for e in events if e["obj"]["id"] >= 740000) == \
        list(range(740000, 740020))


def test_node_ws_offering_the_subprotocol_and_deflate_runs_the_flow(engine) -> None:
    node = shutil.which("node")
    if node is None or not (CLIENTS / "node_modules" / "ws").exists():
        npm = shutil.which("npm")
        if node is None or npm is None:
            unavailable("node and npm are needed for the npm WebSocket client")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=CLIENTS, check=True, timeout=300)
    out = subprocess.run([node, str(CLIENTS / "ws_flow.mjs"), f"http://127.0.0.1:{engine.port}",
                          "750001"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["protocol"] == "pushengine.jsonrpc"
    assert seen["extensions"].startswith("permessage-deflate")
    assert seen["event"]["obj"]["id"] == 750001


def test_the_attach_answer_comes_before_the_replayed_events(engine) -> None:
    first = WsClient(engine.port)
    sid = first.call("session.create")["result"]
    first.call("stream.subscribe_public_live", sid, 10)
    engine.publish(stream(760001))
    first.events(1)
    other = WsClient(engine.port)
    other.send_text(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "session.attach",
                                "params": [sid, 0]}))
    other.wait(lambda m: m.get("method") == "events")
    assert other.messages[0].get("id") == 5, other.messages
    other.close()


def test_a_compressed_bomb_closes_the_socket_with_1009(engine) -> None:
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, CloseConnection, Request
    from wsproto.extensions import PerMessageDeflate
    sock = socket.create_connection(("127.0.0.1", engine.port), timeout=5)
    ws = WSConnection(ConnectionType.CLIENT)
    sock.sendall(ws.send(Request(host="127.0.0.1", target="/api/ws",
                                 extensions=[PerMessageDeflate()])))
    accepted = False
    while not accepted:
        ws.receive_data(sock.recv(65536))
        accepted = any(isinstance(e, AcceptConnection) for e in ws.events())
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb = (c.compress(b"[" * (256 << 20)) + c.flush(zlib.Z_SYNC_FLUSH))[:-4]
    frame = bytes([0xC1, 0xFF]) + len(bomb).to_bytes(8, "big") + b"\x00" * 4 + bomb
    sock.sendall(frame)
    closed = None
    while closed is None:
        data = sock.recv(65536)
        if not data:
            break
        ws.receive_data(data)
        closed = next((e for e in ws.events() if isinstance(e, CloseConnection)), None)
    assert closed is not None and closed.code == 1009
    assert engine.call("stats.online") >= 0

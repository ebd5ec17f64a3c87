"""Real third-party JSON-RPC clients against a running ``twistd -n pushengine
--namespace qik``: jsonrpcclient and tinyrpc from PyPI, jayson and
json-rpc-2.0 from npm (tests/clients). Each runs the whole flow (session,
subscribe, an event, profiles, errors, the namespaced names) and the mixed
batch of the JSON-RPC 2.0 specification, whose every element must reach the
client as a 2.0 response it understands (SPEC section 11)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, Engine, start
from tests.services import unavailable

pytestmark = pytest.mark.e2e
CLIENTS = ROOT / "tests" / "clients"
ANNA = {"id": 340699, "name": "Anna Petrova", "avatar": None, "email": "anna@example.com"}
MIXED_EXTRAS = [{"foo": "boo"}, {"jsonrpc": "1.0", "method": "stats.online", "id": "v1"}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Engine:
    e = start(tmp_path_factory.mktemp("clients"), "--namespace", "qik", "--max-timeout", "10")
    assert e.publish({"type": "User", "action": "upsert", "obj": ANNA}).code == 200
    yield e
    e.stop()
    log = e.log_text()
    assert "Traceback" not in log and "Unhandled" not in log, log[-5000:]


def stream(id_: int) -> dict:
    return {"type": "Stream", "action": "upsert", "obj": {
        "id": id_, "title": f"client stream {id_}", "user_id": 340699, "live": True,
        "public": True, "created_at": f"2030-01-01T00:{id_ % 60:02d}:00Z"}}


def post(engine: Engine, body: bytes) -> bytes:
    request = urllib.request.Request(engine.base + "/api/jsonrpc", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=15) as response:
        return response.read()


# -- jsonrpcclient ------------------------------------------------------------------------

def test_jsonrpcclient_flow(engine: Engine) -> None:
    from jsonrpcclient import Error, Ok, notification, parse_json, request

    def call(method, params=None):
        return parse_json(post(engine, json.dumps(request(method, params)).encode()))

    def result(method, params=None):
        answer = call(method, params)
        assert isinstance(answer, Ok), answer
        return answer.result

    sid = result("qik.session.create")
    key, state = result("stream.subscribe_public_live", (sid, 5))
    assert key == "PublicLiveStreamView(limit=5)" and isinstance(state, list)
    engine.publish(stream(800001))
    events = result("session.get_events", {"sid": sid, "timeout": 5, "ack": 0})
    assert any(e["action"] == "insert" and e["obj"]["id"] == 800001 for e in events), events
    assert result("user.public_profile", (340699,)) == {"id": 340699, "name": "Anna Petrova",
                                                       "avatar": None}
    assert result("qik.user.public_profiles", ([2, 340699],))[0] is None
    unknown = call("session.get_events", ("no-such-session", 0))
    assert isinstance(unknown, Error) and unknown.code == 1001

    # the specification's mixed batch, built with the library, answered element by element
    batch = [request("stats.online"), notification("session.create"),
             request("qik.stats.online"), *MIXED_EXTRAS, request("foo.get", {"name": "myself"})]
    answers = list(parse_json(post(engine, json.dumps(batch).encode())))
    assert len(answers) == 5
    oks = [a for a in answers if isinstance(a, Ok)]
    errors = {a.id: a.code for a in answers if isinstance(a, Error)}
    assert [a.id for a in oks] == [batch[0]["id"], batch[2]["id"]]
    assert errors == {None: -32600, "v1": -32600, batch[-1]["id"]: -32601}
    assert result("session.destroy", (sid,)) is True


# -- tinyrpc ------------------------------------------------------------------------------

def test_tinyrpc_flow(engine: Engine) -> None:
    from tinyrpc import RPCClient
    from tinyrpc.exc import RPCError
    from tinyrpc.protocols.jsonrpc import (
        JSONRPCErrorResponse, JSONRPCProtocol, JSONRPCSuccessResponse)
    from tinyrpc.transports import ClientTransport

    class UrllibTransport(ClientTransport):
        def send_message(self, message: bytes, expect_reply: bool = True) -> bytes:
            return post(engine, message)

    protocol = JSONRPCProtocol()
    client = RPCClient(protocol, UrllibTransport())
    session = client.get_proxy("session.")
    qik_session = client.get_proxy("qik.session.")
    sid = qik_session.create()
    key, _ = client.get_proxy("qik.stream.").subscribe_public_live(sid, 3)
    assert key == "PublicLiveStreamView(limit=3)"
    engine.publish(stream(800002))
    events = session.get_events(sid=sid, timeout=5, ack=0)
    assert any(e["obj"]["id"] == 800002 for e in events if e["action"] == "insert"), events
    assert client.get_proxy("user.").public_profile(340699)["name"] == "Anna Petrova"
    with pytest.raises(RPCError) as info:
        session.get_events("no-such-session", 0)
    assert info.value._jsonrpc_error_code == 1001

    # the mixed batch: tinyrpc's batch request, with the invalid elements added on the wire
    batch = protocol.create_batch_request([
        protocol.create_request("stats.online", [], {}),
        protocol.create_request("session.create", [], {}, one_way=True),
        protocol.create_request("qik.stats.online", [], {}),
        protocol.create_request("foo.get", [], {"name": "myself"}),
    ])
    body = json.loads(batch.serialize())
    # tinyrpc answers only ids it sent: the elements added by hand are sent too
    protocol._pending_replies.extend(["v1", None])
    reply = protocol.parse_reply(post(engine, json.dumps(body + MIXED_EXTRAS).encode()))
    assert len(reply) == 5
    assert all(isinstance(r, (JSONRPCSuccessResponse, JSONRPCErrorResponse)) for r in reply), \
        [repr(r) for r in reply]
    ids = [c["id"] for c in body if "id" in c]
    assert [r.unique_id for r in reply if isinstance(r, JSONRPCSuccessResponse)] == ids[:2]
    errors = {r.unique_id: r._jsonrpc_error_code for r in reply
              if isinstance(r, JSONRPCErrorResponse)}
    assert errors == {ids[2]: -32601, None: -32600, "v1": -32600}
    assert session.destroy(sid) is True


# -- jayson and json-rpc-2.0 (npm) ---------------------------------------------------------

def npm_clients() -> Path:
    """tests/clients/node_modules, installed from the lock file when missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        unavailable("node and npm are needed for the npm JSON-RPC clients")
    modules = CLIENTS / "node_modules"
    if not (modules / "jayson").is_dir() or not (modules / "json-rpc-2.0").is_dir():
        command = [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"]
        try:
            done = subprocess.run(command, cwd=CLIENTS, capture_output=True, text=True,
                                  timeout=300)
        except subprocess.TimeoutExpired:
            unavailable("npm ci of jayson and json-rpc-2.0 took over 300 s (no registry?)")
        if done.returncode != 0:
            unavailable("npm ci of jayson and json-rpc-2.0 failed (is the npm registry "
                        f"reachable?): {done.stderr.strip()[-500:]}")
    return modules


def test_npm_clients_flow(engine: Engine) -> None:
    npm_clients()
    done = subprocess.run([shutil.which("node"), str(CLIENTS / "flow.mjs"), engine.base, "900000"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NODE_NO_WARNINGS": "1"})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["jayson"] == "ok" and seen["json-rpc-2.0"] == "ok"
    assert seen["profile"] == {"id": 340699, "name": "Anna Petrova", "avatar": None}


def test_the_lock_file_pins_the_npm_clients() -> None:
    lock = json.loads((CLIENTS / "package-lock.json").read_text())
    packages = lock["packages"]
    assert packages["node_modules/jayson"]["version"] == "5.0.0"
    assert packages["node_modules/json-rpc-2.0"]["version"] == "1.8.1"

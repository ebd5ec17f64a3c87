"""``twistd pushengine --views FILE`` with a bad file: one line, exit status 1,
no traceback (SPEC section 11); and the original engine's names in a views file."""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.e2e.conftest import ROOT, start, twistd_command
from tests.services import free_port

pytestmark = pytest.mark.e2e


def run_twistd(workdir, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUSHENGINE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([*twistd_command(), "-n", "--pidfile=", "pushengine", "--port",
                           f"tcp:{free_port()}:interface=127.0.0.1", *args],
                          cwd=str(workdir), env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("text, says", [
    ("views:\n  PublicLiveStreamView:\n    type: Stream\n    method: qik..live\n",
     "PublicLiveStreamView: bad method name 'qik..live'"),
    ("views: [unclosed\n", "not valid YAML/JSON: line 2"),
    ("types:\n  User: {public: name}\nviews: {}\n", "types: User: 'public' must be a list"),
    ("types:\n  User: {public: [name]}\nviews:\n  V: {type: Stream, method: user.public_profile}\n",
     "V: method user.public_profile is one of the engine's own methods"),
])
def test_a_bad_views_file_is_one_line_and_status_1(tmp_path, text: str, says: str) -> None:
    views = tmp_path / "views.yaml"
    views.write_text(text)
    done = run_twistd(tmp_path, "--views", str(views))
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == 1, output
    assert "Traceback" not in output
    assert output.splitlines() == [output], output
    assert output.startswith(f"twistd pushengine: --views {views}: "), output
    assert says in output, output


def test_a_namespace_clash_is_one_line(tmp_path) -> None:
    views = tmp_path / "views.yaml"
    views.write_text("views:\n  A: {type: Stream, method: stream.live}\n"
                     "  B: {type: Stream, method: qik.stream.live}\n")
    done = run_twistd(tmp_path, "--views", str(views), "--namespace", "qik")
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == 1 and output.splitlines() == [output], output
    assert "B: method qik.stream.live is also stream.live under --namespace qik" in output


def test_the_original_names_in_a_views_file(tmp_path) -> None:
    """The issue's views file: an alias named qik.stream.subscribe_public_live
    is served, called verbatim in the legacy form."""
    views = tmp_path / "views.yaml"
    views.write_text("types:\n  Stream: {id: id}\nviews:\n  PublicLiveStreamView:\n"
                     "    type: Stream\n    method: qik.stream.subscribe_public_live\n"
                     "    params: [limit]\n    where: {live: true, public: true}\n"
                     "    order: -created_at\n")
    engine = start(tmp_path, "--views", str(views), "--namespace", "qik")
    try:
        sid = engine.post("/api/jsonrpc", {"method": "qik.session.create", "params": []}).json()
        assert isinstance(sid, list) and isinstance(sid[0], str)
        answer = engine.post("/api/jsonrpc", {"method": "qik.stream.subscribe_public_live",
                                              "params": [sid[0], 5]}).json()
        assert answer == [["PublicLiveStreamView(limit=5)", []]]
    finally:
        engine.stop()
    assert "Traceback" not in engine.log_text()

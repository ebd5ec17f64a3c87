"""The browser client as an npm package (static/js/package.json, SPEC section 17).

The declarations in static/js/types are what tsc generates from the JSDoc
today; ``npm pack`` makes a tarball of the client alone; installed into a
fresh Node project it imports by its name and its subpaths, a strict
TypeScript consumer compiles against it, and under Node 20 it runs the whole
flow against a real ``twistd -n pushengine`` over WebSocket, SSE and
long-polling (``ws`` and ``eventsource`` from npm, pinned in
tests/npm/package-lock.json). Without node or npm these tests are skipped; with
CI=true they fail instead.
"""
from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, Engine, start
from tests.services import unavailable

pytestmark = pytest.mark.e2e
HERE = ROOT / "tests" / "npm"
CLIENT = ROOT / "static" / "js"
NPM_FLAGS = ["--no-audit", "--no-fund", "--loglevel=error"]
# Each transport's run publishes streams with higher ids than the run before
# it, so that its streams are the newest and enter the view.
FIRST_IDS = {"ws": 1_000_000, "sse": 2_000_000, "longpoll": 3_000_000}


def run(command: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "NODE_NO_WARNINGS": "1"})


def npm_ci(where: Path, npm: str, *extra: str) -> None:
    """``npm ci`` from the lock file; no registry (by hand): skip."""
    try:
        done = run([npm, "ci", *extra, *NPM_FLAGS], where)
    except subprocess.TimeoutExpired:
        unavailable("npm ci of tests/npm took over 300 s (no registry?)")
    if done.returncode != 0:
        unavailable(f"npm ci of tests/npm failed (is the npm registry reachable?): "
                    f"{done.stderr.strip()[-500:]}")


@pytest.fixture(scope="module")
def npm() -> str:
    """npm, with tests/npm/node_modules (typescript, ws, eventsource) installed from the lock file."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        unavailable("node and npm are needed for the npm package tests")
    modules = HERE / "node_modules"
    if not all((modules / name).is_dir() for name in ("typescript", "ws", "eventsource")):
        npm_ci(HERE, npm)
    return npm


@pytest.fixture(scope="module")
def tarball(npm: str, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pack")
    done = run([npm, "pack", str(CLIENT), "--pack-destination", str(out), "--json", *NPM_FLAGS], ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    (packed,) = json.loads(done.stdout)
    path = out / packed["filename"]
    assert path.is_file()
    path.with_suffix(".files.json").write_text(json.dumps([f["path"] for f in packed["files"]]))
    return path


@pytest.fixture(scope="module")
def project(npm: str, tarball: Path, tmp_path_factory) -> Path:
    """A fresh Node project with the packed client installed, and the flow and consumer beside it."""
    where = tmp_path_factory.mktemp("project")
    for name in ("package.json", "package-lock.json", "flow.mjs", "consumer.ts",
                 "tsconfig.consumer.json"):
        shutil.copy(HERE / name, where / name)
    npm_ci(where, npm, "--prefer-offline")
    done = run([npm, "install", "--no-save", "--offline", *NPM_FLAGS, str(tarball)], where)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (where / "node_modules" / "@pushengine" / "client" / "package.json").is_file()
    return where


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Engine:
    e = start(tmp_path_factory.mktemp("npm-engine"), "--max-timeout", "10")
    yield e
    e.stop()
    log = e.log_text()
    assert "Traceback" not in log and "Unhandled" not in log, log[-5000:]


# -- the package ------------------------------------------------------------------------

def test_the_package_json() -> None:
    package = json.loads((CLIENT / "package.json").read_text())
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert package["name"] == "@pushengine/client"
    assert package["version"] == setup["metadata"]["version"], "the project's version"
    assert package["type"] == "module"
    assert package["types"] == "./types/pushengine.d.ts"
    modules = sorted(p.name for p in CLIENT.glob("*.js"))
    exported = sorted(k[2:] for k in package["exports"] if k.endswith(".js"))
    assert exported == modules, "every module is a public submodule"
    for key, target in package["exports"].items():
        if key == "./package.json":
            continue
        assert (CLIENT / target["default"]).is_file(), key
        assert (CLIENT / target["types"]).is_file(), key
        assert list(target) == ["types", "default"], "types first, as TypeScript reads conditions in order"
    assert "dependencies" not in package, "the client has no dependencies"


def test_the_declarations_are_what_tsc_makes_of_the_jsdoc(npm: str, tmp_path: Path) -> None:
    """static/js/types is committed: it must be what `npm run types` (in tests/npm) writes now,
    and the JS must pass tsc's strict check on the way."""
    tsc = HERE / "node_modules" / "typescript" / "bin" / "tsc"
    done = run(["node", str(tsc), "-p", str(HERE / "tsconfig.types.json"), "--outDir", str(tmp_path)], HERE)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    made = {p.name: p.read_text() for p in tmp_path.glob("*.d.ts")}
    committed = {p.name: p.read_text() for p in (CLIENT / "types").glob("*.d.ts")}
    assert sorted(made) == sorted(committed)
    stale = [name for name in made if made[name] != committed[name]]
    assert not stale, f"static/js/types is stale ({stale}): run `npm run types` in tests/npm"
    assert sorted(made) == sorted(f"{p.stem}.d.ts" for p in CLIENT.glob("*.js"))


def test_the_declarations_hold_no_any() -> None:
    for path in sorted((CLIENT / "types").glob("*.d.ts")):
        code = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
        assert not re.search(r"\bany\b", code), f"{path.name} declares an any"


def test_npm_pack_takes_the_client_alone(tarball: Path) -> None:
    files = set(json.loads(tarball.with_suffix(".files.json").read_text()))
    expected = {"package.json", "README.md", *(p.name for p in CLIENT.glob("*.js")),
                *(f"types/{p.name}" for p in (CLIENT / "types").glob("*.d.ts"))}
    assert files == expected


def test_the_installed_package_imports_by_name_and_subpath(project: Path) -> None:
    package = json.loads((CLIENT / "package.json").read_text())
    subpaths = [k[2:] for k in package["exports"] if k.endswith(".js")]
    script = (
        "const main = await import('@pushengine/client');"
        f"for (const sub of {json.dumps(subpaths)}) await import('@pushengine/client/' + sub);"
        "const { Deferred } = await import('@pushengine/client/deferred.js');"
        "if (main.Deferred !== Deferred) throw new Error('two copies of deferred.js');"
        "const pkg = (await import('@pushengine/client/package.json', { with: { type: 'json' } })).default;"
        "console.log(JSON.stringify({ version: pkg.version, names: Object.keys(main).sort() }));"
    )
    done = run(["node", "--input-type=module", "-e", script], project, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["version"] == "0.1.0"
    for name in ("Api", "Session", "Events", "View", "Deferred", "abortable", "SUBPROTOCOL"):
        assert name in seen["names"]


def test_a_strict_typescript_consumer_compiles_against_the_package(project: Path) -> None:
    tsc = project / "node_modules" / "typescript" / "bin" / "tsc"
    done = run(["node", str(tsc), "-p", "tsconfig.consumer.json"], project, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_a_type_error_in_the_consumer_is_caught(project: Path, tmp_path: Path) -> None:
    """The consumer check can fail: a wrong type for an awaited result is an error."""
    source = (project / "consumer.ts").read_text()
    wrong = source.replace("const sid: string = await session.open({ signal });",
                           "const sid: number = await session.open({ signal });")
    assert wrong != source
    (project / "wrong.ts").write_text(wrong)
    config = json.loads((project / "tsconfig.consumer.json").read_text())
    config["files"] = ["wrong.ts"]
    (project / "tsconfig.wrong.json").write_text(json.dumps(config))
    tsc = project / "node_modules" / "typescript" / "bin" / "tsc"
    done = run(["node", str(tsc), "-p", "tsconfig.wrong.json"], project, timeout=300)
    assert done.returncode != 0 and "not assignable to type 'number'" in done.stdout, done.stdout[-2000:]


def test_the_lock_file_pins_the_tools() -> None:
    packages = json.loads((HERE / "package-lock.json").read_text())["packages"]
    assert packages["node_modules/typescript"]["version"] == "5.9.3"
    assert packages["node_modules/ws"]["version"] == "8.18.3"
    assert packages["node_modules/eventsource"]["version"] == "4.1.1"


# -- the flow in Node, on each transport ----------------------------------------------------

@pytest.mark.parametrize("transport", list(FIRST_IDS))
def test_the_whole_flow_in_node(project: Path, engine: Engine, transport: str) -> None:
    done = run(["node", "flow.mjs", engine.base, transport, str(FIRST_IDS[transport])], project,
               timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["transport"] == transport
    assert seen["key"] == "PublicLiveStreamView(limit=5)"
    actions = seen["actions"]
    assert {"insert", "update", "delete"} <= set(actions), actions
    seqs = seen["seqs"]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "each event once, in order"
    assert seen["abortedAfter"] < 5000


def test_the_engine_serves_the_package_files_as_they_are(engine: Engine) -> None:
    for name in ("pushengine.js", "deferred.js", "view.js"):
        answer = engine.get(f"/static/js/{name}")
        assert answer.code == 200
        assert answer.body == (CLIENT / name).read_bytes()

"""The layers of pushengine/, as data, and the imports that must keep them.

Every module of ``pushengine/`` (and the twistd plugin) is read with ``ast``:
imports at module level, inside functions and under ``TYPE_CHECKING`` (a type
is a dependency too), ``import a.b``, ``from a import b`` and relative
imports. Each import is checked against ``RULES``, the one table of what each
part may import; docs/architecture.md shows the same table (a test below
keeps the two equal). A failure lists every offending import as
``file:line``.
"""
from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"

# What each part may import of pushengine besides its own modules.
#
# A part is a package of pushengine/; "pushengine" is the root
# pushengine/__init__.py (it holds only __version__) and "plugin" is
# the twistd plugins, twisted/plugins/pushengine*.py. An entry names a whole part ("core")
# or one module of one ("web.policy": that module only). Libraries are not
# listed here (see LIBRARIES). The table itself has no cycle (a test says
# so), so code that keeps it has none either.
RULES: dict[str, set[str]] = {
    # the standard library, Twisted and itself: no transport, no outside service
    "core": set(),
    # live queries, windows, operators over the core's changes and events
    "views": {"core"},
    # feature packages below the API: they know the core and the views only.
    # cluster is the session registry's logic (its interface, an in-process
    # backend, hooks, the resumer), not a service: the Redis backend is
    # redis/cluster.py, so cluster sits with the features, not the adapters.
    "segments": {"core", "views"},
    "cluster": {"core", "views"},
    # the transport-free JSON-RPC API: the segments it needs come through
    # core.interfaces.SegmentLookup, given by app/
    "api": {"core", "views"},
    # feature packages above the API: they add JSON-RPC methods (api.rpc)
    "bloom": {"core", "api"},
    "admin": {"core", "views", "api"},
    # the HTTP edge: both fronts, the policy, the route table, the uploads
    "web": {"core", "api", "segments"},
    # transports carry a session's events: the core's delivery interface,
    # the API (WebSocket carries JSON-RPC both ways), and of the edge only
    # what it shares with the streams: the policy, its clock and the route
    # types. Never a front (web.app, web.fastpath): app/service.py puts the
    # transports in the fronts' route table, and a front that imported a
    # transport would make web and transports import each other.
    "transports": {"core", "api", "web.policy", "web.timing", "web.routes"},
    # adapters of outside services. Each implements an interface of the
    # core (core/interfaces.py) or of the feature it serves, and may import
    # that feature's interface: memcached and Redis keep presence rooms
    # (api.presence: the RoomStore protocol and the entry's encoding), Redis
    # also holds Bloom filters, segments and the session registry. A feature
    # never imports its adapter: app/ chooses it.
    "amqp": {"pushengine", "core"},           # the root's __version__ in the AMQP handshake
    "feeds": {"core"},
    "memcache": {"core", "api.presence"},
    "redis": {"core", "api.presence", "bloom", "cluster", "segments"},
    # the HTTP store caches answers through the cache interface of memcache/
    # (its tagged keys), never through a client of its own choosing
    "stores": {"core", "views", "memcache.interface", "memcache.tagged"},
    "webhooks": {"core"},
    "metrics": {"core", "views"},
    # PostgreSQL: the store of record (SQL compiled from the views), the WAL
    # reader, the relay's logic and the node's own WAL feed; the broker it
    # publishes to is given by app/ (app/cdc.py), never imported here; the
    # rows of similar views are kept in the in-process store, with its LSH
    "postgres": {"core", "views", "stores.memory", "stores.kept"},
    # traces: the core's Tracer on OpenTelemetry (the otel extra), the one
    # part that imports it; the root's __version__ names the instrumentation
    "tracing": {"pushengine", "core"},
    # the composition root: builds everything, so it may import everything
    # but the backend client library
    "app": {"pushengine", "core", "views", "segments", "cluster", "api", "bloom", "admin",
            "web", "transports", "amqp", "feeds", "memcache", "redis", "stores",
            "webhooks", "metrics", "postgres", "tracing", "tools"},
    # console scripts and the demo producer. Not app: app/service.py starts
    # tools/demo.py for --demo, so tools importing app would tie the two.
    "tools": {"core", "views", "amqp", "client", "postgres"},
    # the backend client library talks HTTP to a node: nothing of the engine
    # (it has its own errors and JSON handling, so that a backend installs
    # it without the engine's dependencies mattering)
    "client": set(),
    "pushengine": set(),
    # the twistd plugins name pushengine.app.tap and pushengine.app.cdc
    # (strings Twisted imports)
    "plugin": {"app"},
}

# Libraries (top-level names outside the standard library) a part may use,
# for the parts that are restricted; the others may use any dependency.
LIBRARIES: dict[str, set[str]] = {
    "core": {"twisted", "zope"},    # zope.interface: Twisted's interfaces
}

# Imports that break RULES today and are to go: (importing module, imported
# module) -> why. The test fails when one of them no longer occurs, so the
# list only shrinks. Empty: today's code keeps every rule.
KNOWN: dict[tuple[str, str], str] = {}


# -- reading the imports ---------------------------------------------------------

@dataclass(frozen=True)
class Import:
    source: str         # the importing module, dotted
    target: str         # the imported module of pushengine, dotted
    path: str           # the importing file, relative to the project
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def module_index(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module of pushengine/ under ``root``: dotted name -> (file, is a package)."""
    found = {}
    for path in sorted((root / "pushengine").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        found[".".join(parts)] = (path, package)
    return found


def owner(name: str, modules: dict) -> str | None:
    """The module of pushengine that ``name`` (a module, or a name in one) is in."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imported_names(tree: ast.AST, source: str, package: bool) -> list[tuple[str, int]]:
    """(dotted name, line) for every import in ``tree``, wherever it stands;
    ``from a import b`` gives ``a.b`` (a module, or a name of ``a``)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = source.split(".") if package else source.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # a.b is the module b of a, or a name defined in a (then a)
            names += [(module if alias.name == "*" else f"{module}.{alias.name}", node.lineno)
                      for alias in node.names]
    return names


def plugin_names(tree: ast.AST) -> list[tuple[str, int]]:
    """The modules a twistd plugin names as strings (``ServiceMaker``'s module)."""
    return [(node.value, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"pushengine(\.\w+)+", node.value)]


def read_imports(root: Path) -> tuple[list[Import], dict[str, set[str]]]:
    """The imports of pushengine modules by pushengine modules and the plugin,
    and the libraries each part imports (top-level name -> files:lines)."""
    modules = module_index(root)
    sources = [(name, path, package) for name, (path, package) in modules.items()]
    # every twistd plugin of the project (pushengine, pushengine-cdc)
    for plugin in sorted((root / "twisted" / "plugins").glob("pushengine*.py")):
        sources.append(("<plugin>", plugin, False))
    imports: list[Import] = []
    libraries: dict[str, set[str]] = defaultdict(set)
    for source, path, package in sources:
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        names = imported_names(tree, source, package)
        if source == "<plugin>":
            names += plugin_names(tree)
        seen = set()
        for name, line in names:
            top = name.split(".")[0]
            if top != "pushengine":
                if top and top not in sys.stdlib_module_names:
                    libraries[f"{part(source)}:{top}"].add(f"{rel}:{line}")
                continue
            target = owner(name, modules)
            if target is None or target == source or (target, line) in seen:
                continue
            seen.add((target, line))
            imports.append(Import(source, target, rel, line))
    return imports, libraries


def part(module: str) -> str:
    """The part of the table a module belongs to."""
    if module == "<plugin>":
        return "plugin"
    bits = module.split(".")
    return bits[1] if len(bits) > 1 else "pushengine"


def allowed(imp: Import, rules: dict[str, set[str]]) -> bool:
    here, there = part(imp.source), part(imp.target)
    if here == there:
        return True
    for entry in rules.get(here, ()):
        full = "pushengine" if entry == "pushengine" else f"pushengine.{entry}"
        if imp.target == full or (entry != "pushengine" and imp.target.startswith(full + ".")):
            return True
    return False


def offenders(imports: list[Import], rules: dict[str, set[str]],
              known: dict | None = None) -> list[str]:
    known = known or {}
    return sorted(f"{imp.where}: {imp.source} imports {imp.target} "
                  f"({part(imp.source)} may import only {sorted(rules.get(part(imp.source), ()))})"
                  for imp in imports
                  if not allowed(imp, rules) and (imp.source, imp.target) not in known)


def part_graph(imports: list[Import]) -> dict[str, dict[str, list[Import]]]:
    graph: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for imp in imports:
        if part(imp.source) != part(imp.target):
            graph[part(imp.source)][part(imp.target)].append(imp)
    return graph


def cycles(graph: dict[str, set[str]] | dict[str, dict]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def scanned() -> tuple[list[Import], dict[str, set[str]]]:
    return read_imports(ROOT)


# -- the rules -------------------------------------------------------------------

def test_every_part_has_a_rule_and_every_rule_a_part():
    modules = module_index(ROOT)
    parts = {part(name) for name in modules} | {"plugin"}
    assert parts - set(RULES) == set(), "a new part of pushengine/: say in RULES what it may import"
    assert set(RULES) - parts == set(), "RULES names a part that does not exist"
    for here, entries in RULES.items():
        for entry in entries:
            name = "pushengine" if entry == "pushengine" else f"pushengine.{entry}"
            assert name in modules, f"RULES[{here!r}] names {entry!r}, which is no module"


def test_the_rules_have_no_cycle():
    graph = {here: {entry.split(".")[0] for entry in entries} for here, entries in RULES.items()}
    assert cycles(graph) == []


def test_imports_keep_the_layers(scanned):
    imports, _ = scanned
    bad = offenders(imports, RULES, KNOWN)
    assert not bad, "imports that break the layers (docs/architecture.md):\n" + "\n".join(bad)


def test_known_offenders_still_exist(scanned):
    imports, _ = scanned
    present = {(imp.source, imp.target) for imp in imports}
    gone = [pair for pair in KNOWN if pair not in present]
    assert not gone, f"fixed, so remove from KNOWN: {gone}"


def test_no_two_parts_import_each_other(scanned):
    graph = part_graph(scanned[0])
    ties = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph.get(b, {})})
    lines = [f"{a} <-> {b}: " + ", ".join(i.where for i in graph[a][b] + graph[b][a])
             for a, b in ties]
    assert not ties, "two-way ties between parts:\n" + "\n".join(lines)


def loop(graph: dict[str, dict[str, list[Import]]], component: list[str]) -> list[str]:
    """One cycle through the component's first part: the parts in order, back to it."""
    start = component[0]
    paths = {start: [start]}
    todo = [start]
    while todo:
        here = todo.pop(0)
        for there in sorted(graph[here]):
            if there == start:
                return paths[here] + [start]
            if there in component and there not in paths:
                paths[there] = paths[here] + [there]
                todo.append(there)
    return component


def test_no_cycle_between_parts(scanned):
    graph = part_graph(scanned[0])
    found = [loop(graph, c) for c in cycles(graph)]
    lines = [" -> ".join(c) + " (" + ", ".join(graph[a][b][0].where for a, b in zip(c, c[1:]))
             + ")" for c in found]
    assert not found, "cycles between parts:\n" + "\n".join(lines)


def test_restricted_parts_use_only_their_libraries(scanned):
    _, libraries = scanned
    bad = sorted(f"{where}: {key.split(':')[0]} imports {key.split(':')[1]}"
                 for key, places in libraries.items() for where in places
                 if key.split(":")[0] in LIBRARIES
                 and key.split(":")[1] not in LIBRARIES[key.split(":")[0]])
    assert not bad, "libraries a part may not use:\n" + "\n".join(bad)


def test_the_document_shows_the_same_table():
    text = DOC.read_text(encoding="utf-8")
    assert "<!-- rules -->" in text and "<!-- /rules -->" in text, "the table's markers are gone"
    table = text.split("<!-- rules -->")[1].split("<!-- /rules -->")[0]
    shown = {}
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):     # part, may import, why
            shown[cells[0].strip("`")] = set(re.findall(r"`([\w.]+)`", cells[1]))
    assert shown == RULES


# -- the checker itself ------------------------------------------------------------

def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_the_checker_sees_every_kind_of_import(tmp_path):
    root = write(tmp_path, {
        "pushengine/__init__.py": "",
        "pushengine/core/__init__.py": "",
        "pushengine/core/a.py": "import os\nimport yaml\n",
        "pushengine/core/b.py": ("from . import a\n"
                                 "def f():\n    from ..web import front\n"),
        "pushengine/views/__init__.py": "from pushengine.core.a import thing\n",
        "pushengine/web/__init__.py": "",
        "pushengine/web/front.py": "import pushengine.views\nfrom pushengine import core\n",
        "twisted/plugins/pushengine_plugin.py": "ServiceMaker('n', 'pushengine.web.front')\n",
    })
    imports, libraries = read_imports(root)
    got = {(i.source, i.target, i.where) for i in imports}
    assert got == {
        ("pushengine.core.b", "pushengine.core.a", "pushengine/core/b.py:1"),
        ("pushengine.core.b", "pushengine.web.front", "pushengine/core/b.py:3"),
        ("pushengine.views", "pushengine.core.a", "pushengine/views/__init__.py:1"),
        ("pushengine.web.front", "pushengine.views", "pushengine/web/front.py:1"),
        ("pushengine.web.front", "pushengine.core", "pushengine/web/front.py:2"),
        ("<plugin>", "pushengine.web.front", "twisted/plugins/pushengine_plugin.py:1"),
    }
    assert libraries == {"core:yaml": {"pushengine/core/a.py:2"}}
    rules = {"pushengine": set(), "core": set(), "views": {"core"}, "web": {"views"},
             "plugin": {"web"}}
    assert offenders(imports, rules) == [
        "pushengine/core/b.py:3: pushengine.core.b imports pushengine.web.front "
        "(core may import only [])",
        "pushengine/web/front.py:2: pushengine.web.front imports pushengine.core "
        "(web may import only ['views'])"]
    assert offenders(imports, rules, {("pushengine.core.b", "pushengine.web.front"): ""}) == [
        "pushengine/web/front.py:2: pushengine.web.front imports pushengine.core "
        "(web may import only ['views'])"]
    assert cycles(part_graph(imports)) == [["core", "views", "web"]]


def test_a_module_entry_allows_that_module_only():
    rules = {"transports": {"web.policy"}}
    ok = Import("pushengine.transports.sse", "pushengine.web.policy", "x.py", 1)
    front = Import("pushengine.transports.sse", "pushengine.web.fastpath", "x.py", 2)
    near = Import("pushengine.transports.sse", "pushengine.web.policyx", "x.py", 3)
    assert [allowed(i, rules) for i in (ok, front, near)] == [True, False, False]


def test_the_client_distribution_imports_nothing_of_the_engine():
    # client/pushengine_client is installed alone (pushengine-client): its
    # modules import the standard library, themselves and their extras'
    # libraries (Twisted and treq, httpx), never pushengine
    package = ROOT / "client" / "pushengine_client"
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        names = imported_names(tree, "pushengine_client." + path.stem, path.stem == "__init__")
        allowed = {"pushengine_client", "twisted", "treq", "zope", "httpx"}
        found += [f"{rel}:{line}: {name}" for name, line in names
                  if name.split(".")[0] not in allowed
                  and name.split(".")[0] not in sys.stdlib_module_names]
    assert len(list(package.rglob("*.py"))) >= 8
    assert found == []

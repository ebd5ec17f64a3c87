"""A bad views file is a usage error of one line that names the view and what
is wrong (SPEC section 11), never a traceback: through ``Options`` and
``Node`` here, through a real ``twistd`` in tests/e2e/test_usage_errors.py."""
from __future__ import annotations

import copy
import json
import random
from importlib import resources

import pytest
import yaml
from twisted.internet.task import Clock
from twisted.python import usage

from pushengine.app.service import Node
from pushengine.app.tap import Options
from pushengine.views.conditions import ViewDefinitionError
from pushengine.views.spec import load_catalog, parse_catalog

STREAM = "type: Stream, order: -created_at"

# (file text, what the one line must say: every fragment, in any order)
BAD_FILES = [
    ("views: [unclosed\n", ["not valid YAML/JSON", "line 2"]),
    ("views:\n\tV: {type: S}\n", ["not valid YAML/JSON", "line 2, column 1"]),
    ('{"views": {"V": {"type": "S"}}', ["not valid YAML/JSON"]),
    ("", ["needs a 'views' mapping"]),
    ("just text\n", ["needs a 'views' mapping"]),
    ("views: [1, 2]\n", ["needs a 'views' mapping"]),
    ("views: " + "[" * 3000 + "\n", ["nested too deeply"]),
    ("views:\n  V: 5\n", ["V: must be a mapping"]),
    ("views:\n  V: {order: id}\n", ["V: 'type' is required"]),
    ("views:\n  Bad-Name: {type: S}\n", ["bad view name 'Bad-Name'"]),
    (f"views:\n  V: {{{STREAM}, method: stream..live}}\n", ["V: bad method name 'stream..live'"]),
    (f"views:\n  V: {{{STREAM}, method: live}}\n", ["V: bad method name 'live'"]),
    (f"views:\n  V: {{{STREAM}, method: 1qik.live}}\n", ["V: bad method name '1qik.live'"]),
    (f"views:\n  V: {{{STREAM}, method: [a, b]}}\n", ["V: bad method name"]),
    (f"views:\n  V: {{{STREAM}, method: session.create}}\n",
     ["V: bad method name 'session.create'", "engine's own"]),
    (f"views:\n  V: {{{STREAM}, method: stats.online}}\n", ["V: bad method name 'stats.online'"]),
    (f"views:\n  V: {{{STREAM}, method: s.live}}\n  W: {{{STREAM}, method: s.live}}\n",
     ["W: method s.live is already the alias of V"]),
    (f"types:\n  User: {{id: id, public: [name]}}\nviews:\n  V: {{{STREAM}, method: user.public_profile}}\n",
     ["V: method user.public_profile is one of the engine's own methods"]),
    (f"views:\n  V: {{{STREAM}, params: [x]}}\n", ["V: parameter 'x' is not used"]),
    (f"views:\n  V: {{{STREAM}, where: {{a: $x}}}}\n", ["V: $x is not in 'params'"]),
    (f"views:\n  V: {{{STREAM}, where: {{a: {{like: 1}}}}}}\n", ["V: field 'a' needs one operator"]),
    (f"views:\n  V: {{{STREAM}, where: [a]}}\n", ["V: 'where' must be a mapping"]),
    (f"views:\n  V: {{{STREAM}, where: {{near: {{lat: 1}}}}}}\n", ["V: 'near' needs lat, lon and km"]),
    (f"views:\n  V: {{{STREAM}, where: {{visible_to: me}}}}\n", ["V: 'visible_to' takes $session.user"]),
    (f"views:\n  V: {{{STREAM}, params: [a, a]}}\n", ["V: 'params' must be a list of distinct names"]),
    (f"views:\n  V: {{{STREAM}, params: limit}}\n", ["V: 'params' must be a list"]),
    ("views:\n  V: {type: Stream, order: 5}\n", ["V: 'order' must be a field name"]),
    (f"views:\n  V: {{{STREAM}, limit: {{default: 60, max: 50}}}}\n", ["V: limits must be integers"]),
    (f"views:\n  V: {{{STREAM}, limit: many}}\n", ["V: 'limit' must be a number"]),
    (f"types: [User]\nviews:\n  V: {{{STREAM}}}\n", ["'types' must be a mapping"]),
    (f"types:\n  User: 5\nviews:\n  V: {{{STREAM}}}\n", ["types: User: must be a mapping"]),
    (f"types:\n  User: {{id: 5}}\nviews:\n  V: {{{STREAM}}}\n", ["types: User: 'id' must be a field name"]),
    (f"types:\n  User: {{key: id}}\nviews:\n  V: {{{STREAM}}}\n", ["types: User: unknown key 'key'"]),
    (f"types:\n  Stream: {{route: []}}\nviews:\n  V: {{{STREAM}}}\n",
     ["types: Stream: 'route' must be a list of 1 to 4 distinct field names"]),
    (f"types:\n  Stream: {{route: [a, a]}}\nviews:\n  V: {{{STREAM}}}\n",
     ["types: Stream: 'route' must be a list"]),
    (f"types:\n  Stream: {{route: [a, b, c, d, e]}}\nviews:\n  V: {{{STREAM}}}\n",
     ["types: Stream: 'route' must be a list of 1 to 4"]),
    (f"types:\n  Stream: {{route: {{user_id: 1}}}}\nviews:\n  V: {{{STREAM}}}\n",
     ["types: Stream: 'route' must be a list", "such as [user_id]"]),
    (f"types:\n  Stream: {{route: [5]}}\nviews:\n  V: {{{STREAM}}}\n",
     ["types: Stream: 'route' must be a list"]),
    (f"types:\n  User: {{public: name}}\nviews:\n  V: {{{STREAM}}}\n",
     ["types: User: 'public' must be a list of distinct field names"]),
    (f"types:\n  User: {{public: [name, name]}}\nviews:\n  V: {{{STREAM}}}\n",
     ["types: User: 'public' must be a list of distinct field names"]),
    (f"types:\n  User: {{public: []}}\nviews:\n  V: {{{STREAM}}}\n", ["types: User: 'public'"]),
    (f"types:\n  Bad Type: {{id: id}}\nviews:\n  V: {{{STREAM}}}\n", ["types: bad type name 'Bad Type'"]),
]


def parse(*argv: str) -> Options:
    options = Options(environ={})
    options.parseOptions(["--node-id", "views-test", *argv])
    return options


def usage_error(*argv: str) -> str:
    """The message of the UsageError that parsing the options and building the
    node give (either may find the problem)."""
    with pytest.raises(usage.UsageError) as info:
        Node(parse(*argv), Clock())
    return str(info.value)


@pytest.mark.parametrize("text, says", BAD_FILES, ids=[f"bad{i}" for i in range(len(BAD_FILES))])
def test_a_bad_views_file_is_one_line_naming_what_is_wrong(tmp_path, text, says) -> None:
    path = tmp_path / "views.yaml"
    path.write_text(text, "utf-8")
    message = usage_error("--views", str(path))
    assert "\n" not in message and "Traceback" not in message, message
    assert message.startswith(f"--views {path}: "), message
    for fragment in says:
        assert fragment in message, message
    assert len(message) < 400, message


def test_a_views_file_that_is_not_utf8(tmp_path) -> None:
    path = tmp_path / "views.yaml"
    path.write_bytes(b"views:\n  V: {type: S, title: \xff\xfe}\n")
    message = usage_error("--views", str(path))
    assert "\n" not in message and "not UTF-8 text" in message, message


def test_a_views_file_that_cannot_be_read(tmp_path) -> None:
    path = tmp_path / "views.yaml"
    path.write_text("views: {}\n")
    options = parse("--views", str(path))
    path.unlink()  # gone between the options and the node
    with pytest.raises(usage.UsageError) as info:
        Node(options, Clock())
    assert "cannot be read" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("argv", [["--views", "/nonexistent/views.yaml"], ["--views", "/"]])
def test_a_views_path_that_is_not_a_file_is_refused_by_the_options(argv) -> None:
    with pytest.raises(usage.UsageError) as info:
        parse(*argv)
    assert "\n" not in str(info.value)


def test_a_namespace_clash_names_the_view(tmp_path) -> None:
    path = tmp_path / "views.yaml"
    path.write_text(f"views:\n  V: {{{STREAM}, method: stream.live}}\n"
                    f"  Q: {{{STREAM}, method: qik.stream.live}}\n")
    Node(parse("--views", str(path)), Clock())  # fine without a namespace
    message = usage_error("--views", str(path), "--namespace", "qik")
    assert "\n" not in message, message
    assert "Q: method qik.stream.live is also stream.live under --namespace qik" in message, message


def test_alias_names_may_have_more_than_one_dot(tmp_path) -> None:
    path = tmp_path / "views.yaml"
    path.write_text(f"views:\n  PublicLiveStreamView: {{{STREAM}, params: [limit], "
                    f"method: qik.stream.subscribe_public_live, where: {{live: true}}}}\n")
    node = Node(parse("--views", str(path)), Clock())
    assert "qik.stream.subscribe_public_live" in node.dispatcher.methods


def test_mutated_default_views_give_a_catalog_or_one_line() -> None:
    """Thousands of random damages to the default views file: each one loads
    or is refused with a ViewDefinitionError of one line, never anything else."""
    base = yaml.safe_load(resources.files("pushengine").joinpath("default_views.yaml")
                          .read_text("utf-8"))
    values = [None, 0, -1, 1.5, True, "", "x", "$x", "$session.user", "-", "-created_at",
              "a.b.c", "session.x", [], [1], ["a"], [None], [[1]], {}, {"a": 1},
              {"in": "$x"}, {"gt": [1]}, {"has_word": 5}, {"default": 0}, {"max": "a"},
              {"lat": "$lat", "lon": 1, "km": "$km"}, float("nan"), 10 ** 400]
    keys = ["new", "near", "visible_to", "public", "id", "type", "method", "limit", 7, None]
    rng = random.Random(12)

    def damage(node, depth=0):
        if isinstance(node, dict) and node:
            key = rng.choice(list(node))
            roll = rng.random()
            if roll < 0.4 or depth > 3:
                node[key] = copy.deepcopy(rng.choice(values))
            elif roll < 0.5:
                node[rng.choice(keys)] = copy.deepcopy(rng.choice(values))
            else:
                damage(node[key], depth + 1)
        elif isinstance(node, list) and node:
            i = rng.randrange(len(node))
            if isinstance(node[i], (dict, list)) and rng.random() < 0.5:
                damage(node[i], depth + 1)
            else:
                node[i] = copy.deepcopy(rng.choice(values))

    loaded = refused = 0
    for _ in range(3000):
        data = copy.deepcopy(base)
        for _ in range(rng.randint(1, 3)):
            damage(data)
        try:
            parse_catalog(data)
            loaded += 1
        except ViewDefinitionError as e:
            assert "\n" not in str(e), str(e)
            refused += 1
    assert loaded > 100 and refused > 100, (loaded, refused)


def test_the_views_file_may_be_json_with_public_fields(tmp_path) -> None:
    path = tmp_path / "views.json"
    path.write_text(json.dumps({"types": {"User": {"id": "uid", "public": ["uid", "name"]}},
                                "views": {"V": {"type": "Stream", "method": "s.all"}}}))
    catalog = load_catalog(path)
    assert catalog.public_fields == {"User": ["uid", "name"]}
    assert catalog.id_fields["User"] == "uid"


def test_damaged_views_files_build_a_node_or_one_usage_line(tmp_path) -> None:
    """Through the whole node (store indexes, methods, aliases): a damaged
    file builds a node or is one usage line, never another exception."""
    base = yaml.safe_load(resources.files("pushengine").joinpath("default_views.yaml")
                          .read_text("utf-8"))
    values = [None, 0, 1.5, True, "x", "$x", "$session.user", [], ["a"], {}, {"in": "$x"},
              "-created_at", "a.b.c", "user.public_profile", "stream.subscribe_user",
              {"default": 0}]
    keys = ["new", "near", "visible_to", "public", "id", "method", "type", "params"]
    rng = random.Random(7)
    path = tmp_path / "views.json"
    built = refused = 0
    for _ in range(120):
        data = copy.deepcopy(base)
        node = data
        for _ in range(rng.randint(1, 3)):  # walk down a little, then damage
            if not isinstance(node, dict) or not node:
                break
            key = rng.choice(list(node))
            if isinstance(node[key], dict) and rng.random() < 0.7:
                node = node[key]
                continue
            node[rng.choice([key, rng.choice(keys)])] = copy.deepcopy(rng.choice(values))
            break
        path.write_text(json.dumps(data))
        try:
            Node(parse("--views", str(path)), Clock())
            built += 1
        except usage.UsageError as e:
            assert "\n" not in str(e) and str(e).startswith(f"--views {path}: "), str(e)
            refused += 1
    assert built and refused, (built, refused)

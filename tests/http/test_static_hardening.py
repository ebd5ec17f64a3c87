"""Static files and URLs under attack (SPEC section 12): a path that is not UTF-8,
a symlink out of the static folder, a foreign Host in a redirect, a malformed
URL. Every answer is JSON (or an empty redirect) and nothing is logged as an
error."""
from __future__ import annotations

import os

import pytest
import pytest_twisted
from twisted.logger import LogLevel, globalLogPublisher

from pushengine.web.static import StaticFiles
from tests.http.harness import ClockNode, Http, Raw


@pytest.fixture
def logged():
    """What the node logs meanwhile (klein logs through the legacy API: that
    reaches the global publisher too)."""
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


def no_errors(events: list[dict]) -> None:
    bad = [e for e in events if "log_failure" in e or e.get("isError")
           or e.get("log_level") in (LogLevel.error, LogLevel.critical)]
    assert bad == [], bad


def raw_get(node: ClockNode, target: bytes, host: bytes = b"127.0.0.1") -> Raw:
    raw = Raw(node.site())
    raw.send(b"GET " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
    return raw


def json_error(raw: Raw, code: int) -> dict:
    reply = raw.response()
    assert reply.code == code, reply
    assert reply.content_type == "application/json", reply
    return reply.json()


@pytest.fixture
def folders(tmp_path):
    """static/ with a file, a link to a file inside, links to a file and a
    folder outside, and a link that climbs out with ..; outside/ beside it."""
    static = tmp_path / "static"
    outside = tmp_path / "outside"
    (static / "sub").mkdir(parents=True)
    outside.mkdir()
    (static / "a.js").write_text("export const a = 1;\n")
    (static / "sub" / "b.js").write_text("export const b = 2;\n")
    (outside / "secret.js").write_text("SECRET\n")
    os.symlink(static / "a.js", static / "alias.js")
    os.symlink(outside / "secret.js", static / "leak.js")
    os.symlink(outside, static / "leakdir")
    os.symlink("../../outside/secret.js", static / "sub" / "climb.js")
    os.symlink("/etc/passwd", static / "passwd")
    return static


# -- a path segment that is not UTF-8 -----------------------------------------------------

@pytest.mark.parametrize("target", [b"/static/js/%ff", b"/static/js/sub/%C0%AF.js",
                                    b"/examples/%ff", b"/api/jsonrpc/%ff", b"/%ff%fe",
                                    b"/\x7f\x80"])
def test_a_path_that_is_not_utf8_is_a_json_400_and_no_error_is_logged(
        logged, target: bytes) -> None:
    node = ClockNode()
    assert "error" in json_error(raw_get(node, target), 400)
    no_errors(logged)


def test_static_files_refuse_a_segment_that_is_not_utf8_by_themselves(logged, folders) -> None:
    files = StaticFiles(str(folders))
    assert files.getChild(b"\xff", None) is files.childNotFound
    assert files.getChild(b"a\xc0\xaf.js", None) is files.childNotFound
    no_errors(logged)


# -- symlinks ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/static/js/leak.js", "/static/js/leakdir/secret.js",
                                  "/static/js/sub/climb.js", "/static/js/passwd",
                                  "/static/js/leakdir/", "/static/js/leakdir"])
def test_a_symlink_out_of_the_folder_is_a_json_404(node: ClockNode, http: Http, folders,
                                                   path: str) -> None:
    node.web.js = StaticFiles(str(folders))
    reply = http.get(path)
    assert reply.code == 404, reply
    assert reply.content_type == "application/json" and reply.json()
    assert b"SECRET" not in reply.body and b"root:" not in reply.body


@pytest_twisted.ensureDeferred
async def test_files_and_links_inside_the_folder_are_served(node: ClockNode, http: Http,
                                                            folders) -> None:
    node.web.js = StaticFiles(str(folders))
    for path, body in (("/static/js/a.js", b"export const a = 1;\n"),
                       ("/static/js/alias.js", b"export const a = 1;\n"),
                       ("/static/js/sub/b.js", b"export const b = 2;\n")):
        reply = await http.send("GET", path).settle()
        assert (reply.code, reply.body) == (200, body), path


@pytest_twisted.ensureDeferred
async def test_a_static_folder_that_is_itself_a_link_serves_its_files(
        node: ClockNode, http: Http, folders, tmp_path) -> None:
    os.symlink(folders, tmp_path / "linked")
    node.web.js = StaticFiles(str(tmp_path / "linked"))
    reply = await http.send("GET", "/static/js/sub/b.js").settle()
    assert reply.code == 200
    assert http.get("/static/js/leak.js").code == 404


# -- redirects are relative ------------------------------------------------------------

@pytest.mark.parametrize("target, location", [
    (b"/examples", "/examples/"),
    (b"/examples?x=1&y=%C3%A9", "/examples/?x=1&y=%C3%A9"),
    (b"//examples", "/examples/"),
    (b"/static/js", "/static/js/"),
    (b"/", "/examples/"),
])
@pytest.mark.parametrize("host", [b"evil.example", b"evil.example:444", b"evil/x",
                                  b"127.0.0.1:8080", "é.example".encode()])
def test_redirects_are_relative_whatever_the_host(logged, target: bytes, location: str,
                                                  host: bytes) -> None:
    node = ClockNode()
    reply = raw_get(node, target, host).response()
    assert reply.code in (301, 302, 308), reply
    assert reply.header("location") == location
    assert reply.body == b""
    no_errors(logged)


def test_a_static_directory_redirect_is_relative(folders) -> None:
    node = ClockNode()
    node.web.js = StaticFiles(str(folders))
    reply = raw_get(node, b"/static/js/sub?v=1", b"evil.example").response()
    assert reply.code in (301, 302) and reply.header("location") == "/static/js/sub/?v=1"
    reply = raw_get(node, b"/static/js/sub", b"evil.example").response()
    assert reply.header("location") == "/static/js/sub/"


def test_a_redirect_never_leaves_the_site() -> None:
    node = ClockNode()
    for target in (b"///evil.example/examples", b"//evil.example//examples",
                   b"/static/js/%2f%2fevil.example%2fx", b"/%2f%2fevil.example/examples",
                   b"/examples%2f", b"/static/js/%2fetc%2fpasswd"):
        reply = raw_get(node, target, b"evil.example").response()
        if reply.code in (301, 302, 308):
            location = reply.header("location")
            assert location.startswith("/") and not location.startswith("//"), location
        else:
            assert reply.code == 404 and reply.json()


# -- malformed URLs and Hosts ----------------------------------------------------------

@pytest.mark.parametrize("target", [b"/%zz", b"/examples/%", b"/static/js/a%2", b"/%g0"])
def test_a_bad_percent_escape_is_a_json_400(logged, target: bytes) -> None:
    node = ClockNode()
    assert "error" in json_error(raw_get(node, target), 400)
    no_errors(logged)


@pytest.mark.parametrize("host", [b"\xff", b"..", b"a..b", b"x" * 64 + b".example"])
def test_a_host_that_is_no_host_name_is_a_json_400(logged, host: bytes) -> None:
    node = ClockNode()
    for target in (b"/health", b"/examples", b"/nope"):
        assert "error" in json_error(raw_get(node, target, host), 400)
    no_errors(logged)


@pytest.mark.parametrize("target", [b"/a b", b"/\xff", b"/\x01"])
def test_a_malformed_request_target_is_a_json_400(logged, target: bytes) -> None:
    node = ClockNode()
    raw = raw_get(node, target)
    assert json_error(raw, 400) == {"error": "bad request"}
    assert raw.closing
    no_errors(logged)


# (an absolute-form target, ``http://evil.example/health``, is served as its
# origin form since SPEC section 22: tests/http/test_round_three.py)
@pytest.mark.parametrize("target", [b"/%00", b"/static/js/%2e%2e/%2e%2e/setup.cfg",
                                    b"/static/js/..%2f..%2fsetup.cfg", b"/examples/%2e%2e/",
                                    b"http://evil.example/%2e%2e/setup.cfg"])
def test_odd_but_well_formed_urls_are_json(logged, target: bytes) -> None:
    node = ClockNode()
    reply = raw_get(node, target).response()
    assert reply.code in (400, 404), reply
    assert reply.content_type == "application/json" and reply.json()
    no_errors(logged)

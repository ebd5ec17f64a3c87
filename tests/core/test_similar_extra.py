"""The ``similar`` extra (numpy, datasketch) missing: the built-in views
leave their similar view out with one log line, a views file that declares
a similar view is refused naming the extra, and nothing imports numpy."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from twisted.logger import globalLogPublisher

from pushengine.views import extra
from pushengine.views.spec import ViewDefinitionError, load_catalog, parse_catalog

ROOT = Path(__file__).resolve().parents[2]
SIMILAR_VIEWS = """
views:
  LikeView:
    type: Stream
    params: [text]
    where:
      similar: {field: title, text: $text, threshold: 0.5}
"""


@pytest.fixture
def no_extra(monkeypatch):
    """As if ``pip install pushengine`` had gone without ``[similar]``: an
    import of datasketch fails (a None in sys.modules)."""
    monkeypatch.setitem(sys.modules, "datasketch", None)
    assert extra.missing() == ["datasketch"]


@pytest.fixture
def logged():
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


def test_the_extra_is_there_in_the_test_install():
    # the test extra includes similar: CI tests the similar views
    assert extra.available()
    assert "SimilarStreamView" in load_catalog(None).views


def test_builtin_views_leave_similar_out_with_one_log_line(no_extra, logged):
    catalog = load_catalog(None)
    assert "SimilarStreamView" not in catalog.views
    assert "stream.subscribe_similar" not in catalog.methods
    assert {"PublicLiveStreamView", "WordStreamView", "NearStreamView"} <= set(catalog.views)
    lines = [e for e in logged if "Left out of the built-in views" in e.get("log_format", "")]
    assert len(lines) == 1
    assert lines[0]["views"] == "SimilarStreamView"
    assert lines[0]["install"] == "pip install 'pushengine[similar]'"


def test_own_views_file_with_a_similar_view_is_refused(no_extra, tmp_path):
    path = tmp_path / "views.yaml"
    path.write_text(SIMILAR_VIEWS)
    with pytest.raises(ViewDefinitionError) as refused:
        load_catalog(path)
    message = str(refused.value)
    assert message.startswith("LikeView: 'similar' needs the similar extra")
    assert "pip install 'pushengine[similar]'" in message


def test_distinct_needs_no_extra(no_extra):
    # distinct compares token sets exactly (views/tokens.py): no MinHash
    catalog = parse_catalog({"views": {"FeedView": {
        "type": "Stream", "where": {"live": True}, "order": "-created_at",
        "distinct": {"field": "title", "threshold": 0.8}}}})
    assert catalog.views["FeedView"].distinct is not None


def test_a_node_without_similar_views_imports_no_numpy():
    # in a fresh interpreter, as a node starts: the views loaded, the
    # engine's modules imported; numpy (and datasketch, scipy) stay out
    code = textwrap.dedent("""
        import sys
        sys.modules["datasketch"] = None
        import pushengine.app.service, pushengine.app.tap
        from pushengine.views.spec import load_catalog
        catalog = load_catalog(None)
        assert "SimilarStreamView" not in catalog.views
        heavy = sorted({m.split(".")[0] for m in sys.modules} & {"numpy", "scipy"})
        assert not heavy, heavy
    """)
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)

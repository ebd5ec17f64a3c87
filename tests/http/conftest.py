from __future__ import annotations

import pytest

from tests.http.harness import ClockNode, Http, Rpc


@pytest.fixture
def node() -> ClockNode:
    return ClockNode()


@pytest.fixture
def http(node: ClockNode) -> Http:
    return Http(node.web.resource())


@pytest.fixture
def rpc(http: Http) -> Rpc:
    return Rpc(http)


@pytest.fixture
def sid(rpc: Rpc) -> str:
    return rpc("session.create")

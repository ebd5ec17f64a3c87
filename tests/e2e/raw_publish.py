"""Publish raw message bodies (even malformed ones) to an exchange.

    python -m tests.e2e.raw_publish AMQP_URL EXCHANGE < bodies (one per line, hex)

Tests use it to put bytes on the exchange that pushengine-publish would refuse.
"""
from __future__ import annotations

import sys

from twisted.internet.defer import Deferred
from twisted.internet.task import react

from pushengine.amqp.publisher import connect_publisher, publish_all


async def _main(reactor, url: str, exchange: str, bodies: list[bytes]) -> None:
    publisher = await connect_publisher(reactor, url, exchange)
    try:
        await publish_all(publisher, bodies)
    finally:
        await publisher.close()


def main() -> None:
    url, exchange = sys.argv[1], sys.argv[2]
    bodies = [bytes.fromhex(line.strip()) for line in sys.stdin if line.strip()]
    react(lambda reactor: Deferred.fromCoroutine(_main(reactor, url, exchange, bodies)))


if __name__ == "__main__":
    main()

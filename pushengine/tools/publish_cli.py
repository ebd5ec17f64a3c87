"""``pushengine-publish``: publish change messages to the AMQP exchange.

    pushengine-publish --amqp amqp://guest:guest@localhost:5672/ \\
        '{"type": "Stream", "action": "upsert", "obj": {"id": 1, "title": "cat"}}'
    some-producer | pushengine-publish --amqp amqp://...   # JSON lines on stdin

Each argument, or each non-blank line of standard input, is one message: a
change or a JSON array of changes.  Everything is checked before anything
is sent; each message is published with publisher confirms and the command
prints how many changes the broker confirmed.  Exit status: 0 when all were
confirmed, 1 when the broker could not be reached or refused some, 2 on bad
input.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence, TextIO

from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import react

from pushengine.amqp.connection import describe
from pushengine.amqp.feed import DEFAULT_EXCHANGE
from pushengine.amqp.publisher import connect_publisher, publish_all
from pushengine.amqp.url import parse_amqp_url
from pushengine.core.changes import decode_changes, encode_changes

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class BadInput(Exception):
    """A message that is not a valid change or batch of changes."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pushengine-publish",
        description="Publish change messages (a JSON change or array of changes "
                    "per argument, or per line of standard input) to the "
                    "pushengine AMQP fanout exchange, with publisher confirms.")
    parser.add_argument(
        "--amqp", default=os.environ.get("PUSHENGINE_AMQP"),
        help="broker URL, amqp://user:pass@host:5672/vhost "
             "(default: $PUSHENGINE_AMQP)")
    parser.add_argument(
        "--exchange", default=os.environ.get("PUSHENGINE_AMQP_EXCHANGE", DEFAULT_EXCHANGE),
        help=f"fanout exchange (default: $PUSHENGINE_AMQP_EXCHANGE or {DEFAULT_EXCHANGE})")
    parser.add_argument(
        "--timeout", type=float, default=10.0,
        help="seconds to wait for the connection and for the confirms (default 10)")
    parser.add_argument(
        "messages", nargs="*", metavar="JSON",
        help="messages; when none is given, JSON lines are read from standard input")
    return parser


def read_messages(texts: Sequence[tuple[int, str]], where: str
                  ) -> list[tuple[bytes, int]]:
    """Validate each numbered message; return (body, number of changes)
    pairs, bodies as normalized JSON arrays.

    Raises BadInput naming the first bad message and why.
    """
    bodies = []
    for number, text in texts:
        changes, errors = decode_changes(text)
        if errors:
            raise BadInput(f"{where} {number}: " + "; ".join(errors))
        if not changes:
            raise BadInput(f"{where} {number}: an empty batch")
        bodies.append((encode_changes(changes), len(changes)))
    return bodies


def collect(args: argparse.Namespace, stdin: TextIO) -> list[tuple[bytes, int]]:
    if args.messages:
        return read_messages(list(enumerate(args.messages, 1)), "argument")
    lines = [(n, line) for n, line in enumerate(stdin, 1) if line.strip()]
    return read_messages(lines, "line")


@inlineCallbacks
def run(reactor, url, exchange: str, messages, timeout: float, out: TextIO, err: TextIO):
    """Connect, publish, report; fire with the exit status."""
    try:
        publisher = yield connect_publisher(reactor, url, exchange, timeout=timeout)
    except Exception as e:
        err.write(f"pushengine-publish: cannot publish to {url}: {describe(e)}\n")
        return EXIT_FAILED
    try:
        outcomes = publish_all(publisher, [body for body, _ in messages])
        outcomes.addTimeout(timeout, reactor)
        results = yield outcomes
    except Exception as e:
        err.write(f"pushengine-publish: no answer from the broker: {describe(e)}\n")
        publisher.client.transport.abortConnection()
        return EXIT_FAILED
    confirmed = sum(count for (ok, _), (_, count) in zip(results, messages) if ok)
    failures = [describe(value) for ok, value in results if not ok]
    try:
        yield publisher.close()
    except Exception:
        pass
    out.write(f"{confirmed} change(s) in {len(messages) - len(failures)} message(s) "
              f"confirmed by the broker\n")
    if failures:
        err.write(f"pushengine-publish: {len(failures)} message(s) not confirmed: "
                  f"{failures[0]}\n")
        return EXIT_FAILED
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.amqp:
        parser.error("--amqp URL is required (or set PUSHENGINE_AMQP)")
    try:
        url = parse_amqp_url(args.amqp)
    except ValueError as e:
        parser.error(str(e))
    try:
        messages = collect(args, sys.stdin)
    except BadInput as e:
        sys.stderr.write(f"pushengine-publish: {e}\n")
        sys.exit(EXIT_BAD_INPUT)
    if not messages:
        sys.stderr.write("pushengine-publish: nothing to publish\n")
        sys.exit(EXIT_BAD_INPUT)

    def start(reactor):
        d = run(reactor, url, args.exchange, messages, args.timeout,
                sys.stdout, sys.stderr)
        d.addCallback(_exit_with)
        return d

    react(start)


def _exit_with(status: int) -> None:
    if status:
        raise SystemExit(status)


if __name__ == "__main__":
    main()

"""``pushengine-publish``: publish change messages to the AMQP exchange.

    pushengine-publish --amqp amqp://guest:guest@localhost:5672/ \\
        '{"type": "Stream", "action": "upsert", "obj": {"id": 1, "title": "cat"}}'
    some-producer | pushengine-publish --amqp amqp://...   # JSON lines on stdin
    pushengine-publish --amqp amqp://... --routing interest --views views.yaml ...

Each argument, or each non-blank line of standard input, is one message: a
change or a JSON array of changes.  Everything is checked before anything
is sent; each message is published with publisher confirms and the command
prints how many changes the broker confirmed.  With ``--routing interest``
the changes go to the topic exchange with the routing keys of the routing
fields the views file declares (docs/amqp.md); a message then becomes one
per group of consecutive changes with the same keys.  Exit status: 0 when all were
confirmed, 1 when the broker could not be reached or refused some, 2 on bad
input.
"""
from __future__ import annotations

import argparse
import os
import sys
import uuid
from typing import Sequence, TextIO

import yaml
from twisted.internet.defer import DeferredList, gatherResults, inlineCallbacks
from twisted.internet.task import react

from pushengine.amqp.connection import describe
from pushengine.amqp.feed import DEFAULT_EXCHANGE, DEFAULT_ROUTED_EXCHANGE
from pushengine.amqp.publisher import connect_publisher, copy_properties, publish_all
from pushengine.amqp.routing import plan, routes_of
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
        "--exchange", default=os.environ.get("PUSHENGINE_AMQP_EXCHANGE"),
        help=f"exchange (default: $PUSHENGINE_AMQP_EXCHANGE, else {DEFAULT_EXCHANGE}, "
             f"or {DEFAULT_ROUTED_EXCHANGE} with --routing interest)")
    parser.add_argument(
        "--routing", choices=("fanout", "interest"),
        default=os.environ.get("PUSHENGINE_AMQP_ROUTING", "fanout"),
        help="fanout (default), or interest: a topic exchange and routing keys from the "
             "routing fields of --views (default: $PUSHENGINE_AMQP_ROUTING)")
    parser.add_argument(
        "--views", default=os.environ.get("PUSHENGINE_VIEWS"),
        help="the nodes' views file, whose types declare the routing fields "
             "(needed with --routing interest; default: $PUSHENGINE_VIEWS)")
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


def read_routes(path: str) -> dict[str, list[str]]:
    """The routing fields the views file at ``path`` declares."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise BadInput(f"--views {path}: cannot be read ({e})") from None
    try:
        return routes_of(data.get("types") if isinstance(data, dict) else None)
    except ValueError as e:
        raise BadInput(f"--views {path}: {e}") from None


def routed(publisher, messages, routes: dict[str, list[str]]):
    """Publish every message with its routing keys (``amqp.routing.plan``);
    fire with one DeferredList outcome per message."""
    sent = []
    for body, _ in messages:
        parts = []
        for batch, keys in plan(decode_changes(body)[0], routes):
            part = encode_changes(batch)
            properties = None if len(keys) == 1 else copy_properties(
                publisher.clock.seconds(), uuid.uuid4().hex, len(keys))
            parts += [publisher.publish(part, key, properties) for key in keys]
        sent.append(gatherResults(parts, consumeErrors=True))
    return DeferredList(sent, consumeErrors=True)


@inlineCallbacks
def run(reactor, url, exchange: str, messages, timeout: float, out: TextIO, err: TextIO,
        routes: dict[str, list[str]] | None = None):
    """Connect, publish, report; fire with the exit status. ``routes``: the
    routing fields of each type, for the interest mode (a topic exchange)."""
    try:
        publisher = yield connect_publisher(reactor, url, exchange, timeout=timeout,
                                            exchange_type="fanout" if routes is None
                                            else "topic")
    except Exception as e:
        err.write(f"pushengine-publish: cannot publish to {url}: {describe(e)}\n")
        return EXIT_FAILED
    try:
        if routes is None:
            outcomes = publish_all(publisher, [body for body, _ in messages])
        else:
            outcomes = routed(publisher, messages, routes)
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
    routes = None
    if args.routing == "interest" and not args.views:
        parser.error("--routing interest needs --views FILE (or set PUSHENGINE_VIEWS)")
    exchange = args.exchange or (DEFAULT_ROUTED_EXCHANGE if args.routing == "interest"
                                 else DEFAULT_EXCHANGE)
    try:
        if args.routing == "interest":
            routes = read_routes(args.views)
        messages = collect(args, sys.stdin)
    except BadInput as e:
        sys.stderr.write(f"pushengine-publish: {e}\n")
        sys.exit(EXIT_BAD_INPUT)
    if not messages:
        sys.stderr.write("pushengine-publish: nothing to publish\n")
        sys.exit(EXIT_BAD_INPUT)

    def start(reactor):
        d = run(reactor, url, exchange, messages, args.timeout,
                sys.stdout, sys.stderr, routes)
        d.addCallback(_exit_with)
        return d

    react(start)


def _exit_with(status: int) -> None:
    if status:
        raise SystemExit(status)


if __name__ == "__main__":
    main()

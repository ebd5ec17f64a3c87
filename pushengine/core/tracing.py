"""Spans of what a node does, behind a protocol that needs no tracing library.

The dispatcher (a JSON-RPC call), the view registry (an initial-state read)
and the engine (a change application) each start a span through a
``Tracer`` they are given; ``pushengine/tracing/`` implements it with
OpenTelemetry and ``app/`` wires it in with ``--otlp-endpoint``. Without
it the node's tracer is ``NO_TRACER``: each part sees ``enabled`` False
once, when it is built, keeps None instead, and from then on pays one
``is None`` test per call, read or batch of changes (nothing is imported,
nothing allocated).

A span's parent is, in this order: a W3C ``traceparent`` the caller sent
(``start``'s ``traceparent``; the tracer ignores a value it cannot read),
else the span made current with ``enter`` (the call a read starts in), else
none: the span starts a trace. The reactor runs everything on one thread,
so the current span is one value: ``enter`` sets it for a synchronous
stretch of work and returns the one it replaced, which ``leave`` puts back.
"""
from __future__ import annotations

from typing import Mapping, Protocol, Union

# what a span's attribute may hold (a tracer caps strings)
Attribute = Union[str, bool, int, float]


class Span(Protocol):
    """One span: its attributes are set while it runs, ``end`` closes it
    (a span not ended is never exported). Sampled out, it records nothing
    (``is_recording`` False) and costs nothing more."""

    def set_attribute(self, key: str, value: Attribute) -> None: ...

    def is_recording(self) -> bool: ...

    def end(self) -> None: ...


class Tracer(Protocol):
    """What the node's parts call (see the module docstring)."""

    @property
    def enabled(self) -> bool:
        """False: a no-op; a part keeps None instead and skips every call."""

    def start(self, name: str, attributes: Mapping[str, Attribute] | None = None,
              traceparent: str | None = None, kind: str = "internal") -> Span:
        """A span beginning now: the child of ``traceparent`` when it is a
        valid W3C ``traceparent`` value, else of the current span, else a
        new trace's root (sampled or not as the tracer decides). ``kind``:
        ``server`` (a call a client made), ``consumer`` (changes a feed
        delivered) or ``internal``."""

    def enter(self, span: Span) -> Span | None:
        """Make ``span`` current (the parent of spans started meanwhile);
        the span it replaces, to give back to ``leave``."""

    def leave(self, previous: Span | None) -> None:
        """Make ``previous`` (what ``enter`` returned) current again."""

    def failed(self, span: Span, description: str) -> None:
        """Mark ``span`` as an error, with a short description."""


class _NoSpan:
    """A span that records nothing."""

    __slots__ = ()

    def set_attribute(self, key: str, value: Attribute) -> None:
        pass

    def is_recording(self) -> bool:
        return False

    def end(self) -> None:
        pass


NO_SPAN: Span = _NoSpan()


class NoTracer:
    """The tracer of a node without ``--otlp-endpoint``: records nothing."""

    __slots__ = ()

    @property
    def enabled(self) -> bool:
        return False

    def start(self, name: str, attributes: Mapping[str, Attribute] | None = None,
              traceparent: str | None = None, kind: str = "internal") -> Span:
        return NO_SPAN

    def enter(self, span: Span) -> Span | None:
        return None

    def leave(self, previous: Span | None) -> None:
        pass

    def failed(self, span: Span, description: str) -> None:
        pass


NO_TRACER: Tracer = NoTracer()


def active(tracer: Tracer | None) -> Tracer | None:
    """``tracer`` when it records, else None: what a part keeps, so that a
    node without tracing pays one ``is None`` test and no call."""
    return tracer if tracer is not None and tracer.enabled else None

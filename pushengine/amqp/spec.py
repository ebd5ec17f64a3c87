"""The AMQP 0-9-1 protocol spec that txamqp needs, loaded from package data.

txamqp builds its methods from a spec XML at run time and ships none for
0-9-1; ours is RabbitMQ's extended one (confirm.select, basic.nack and the
server-sent basic.ack/nack/cancel that publisher confirms and consumer
cancel notifications use).  Parsing it takes a few milliseconds, so it is
loaded once per process.
"""
from __future__ import annotations

from functools import lru_cache
from importlib import resources

from txamqp import spec as txamqp_spec

SPEC_FILE = "amqp0-9-1.stripped.extended.xml"


@lru_cache(maxsize=1)
def load_spec():
    """Return the parsed 0-9-1 spec (a ``txamqp.spec.Spec``), shared."""
    text = resources.files("pushengine.amqp").joinpath("spec").joinpath(SPEC_FILE).read_text(
        encoding="utf-8")
    return txamqp_spec.load_string(text, specfilename=SPEC_FILE)

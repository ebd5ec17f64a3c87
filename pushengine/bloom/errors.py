"""The errors of the Bloom filter commands, spelled as the Redis module spells
them (without its ``ERR`` prefix), each with the JSON-RPC code it is answered
with (SPEC section 14)."""
from __future__ import annotations

from pushengine.core.errors import ApiError, BadParams

#: the filter state refuses the command: code 1010
ITEM_EXISTS = "item exists"
NOT_FOUND = "not found"
FULL = "non scaling filter is full"
TOO_LARGE = "could not create filter: it would pass the largest filter size"
CANNOT_GROW = "could not grow filter: it would pass the largest filter size or number of layers"
NO_ROOM = ("could not create filter: the filters of this node would pass their memory cap "
           "(--bloom-max-bytes)")
NO_ROOM_TO_GROW = ("could not grow filter: the filters of this node would pass their memory cap "
                   "(--bloom-max-bytes)")
#: the arguments are wrong: code -32602
BAD_ERROR_RATE = "(0 < error rate range < 1)"
BAD_CAPACITY = "(capacity should be larger than 0)"
ERROR_RATE_TOO_LOW = "bad error rate: at least 1e-09"
CAPACITY_TOO_LARGE = "bad capacity: at most 100000000"
BAD_EXPANSION = "bad expansion"
NONSCALING_EXPANSION = "Nonscaling filters cannot expand"
BAD_ITEM = "an item must be a string or an integer"
BAD_KEY = "a key must be a non-empty string"


class BloomError(ApiError):
    """A command the filter's state refuses (``item exists``, ``not found``,
    ``non scaling filter is full``)."""

    code = 1010


class BloomArgumentError(BadParams):
    """A command whose arguments are wrong (an error rate outside (0, 1), ...)."""


class BloomUnavailable(ApiError):
    """The store of the filters (Redis) cannot be reached now: nothing was done."""

    code = 1011

"""The ``bf.*`` methods as the API's OpenRPC document describes them
(``pushengine.api.openrpc``): their params' schemas with the bloom
package's own limits, merged into the document by the node."""
from __future__ import annotations

from pushengine.api.openrpc import OBJECT, Description, Schema, _nullable, _string
from pushengine.bloom.methods import MAX_ITEMS as MAX_BLOOM_ITEMS
from pushengine.bloom.params import MAX_CAPACITY, MAX_EXPANSION, MIN_ERROR

BLOOM_ERRORS = (1003, 1010, 1011, -32602)
BLOOM_KEY = _string("the filter's name", min_length=1)
BLOOM_ITEM: Schema = {"type": ["string", "integer"], "description": "an item"}
BLOOM_ITEMS: Schema = {"type": "array", "items": BLOOM_ITEM, "minItems": 1,
                       "maxItems": MAX_BLOOM_ITEMS}
BLOOM_ANSWERS: Schema = {"type": "array", "items": {"oneOf": [
    {"type": "integer", "enum": [0, 1]},
    {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["code", "message"],
        "properties": {"code": {"type": "integer"}, "message": {"type": "string"}}}}}]}}
EXPANSION: Schema = _nullable({"type": "integer", "minimum": 1, "maximum": MAX_EXPANSION})
CAPACITY: Schema = {"type": "integer", "minimum": 1, "maximum": MAX_CAPACITY}
ERROR_RATE: Schema = {"type": "number", "minimum": MIN_ERROR, "exclusiveMaximum": 1}


DESCRIPTIONS: dict[str, Description] = {
    "bf.reserve": Description(
        "Create a Bloom filter (BF.RESERVE).",
        {"key": BLOOM_KEY, "error_rate": ERROR_RATE, "capacity": CAPACITY,
         "expansion": EXPANSION, "nonscaling": {"type": "boolean", "default": False}},
        {"type": "string", "const": "OK"}, BLOOM_ERRORS),
    "bf.add": Description(
        "Add an item (BF.ADD): 1 when it was new.", {"key": BLOOM_KEY, "item": BLOOM_ITEM},
        {"type": "integer", "enum": [0, 1]}, BLOOM_ERRORS),
    "bf.madd": Description(
        "Add items (BF.MADD).", {"key": BLOOM_KEY, "items": BLOOM_ITEMS}, BLOOM_ANSWERS,
        BLOOM_ERRORS),
    "bf.exists": Description(
        "Whether an item may be in a filter (BF.EXISTS).",
        {"key": BLOOM_KEY, "item": BLOOM_ITEM}, {"type": "integer", "enum": [0, 1]},
        BLOOM_ERRORS),
    "bf.mexists": Description(
        "Whether items may be in a filter (BF.MEXISTS).",
        {"key": BLOOM_KEY, "items": BLOOM_ITEMS},
        {"type": "array", "items": {"type": "integer", "enum": [0, 1]}}, BLOOM_ERRORS),
    "bf.insert": Description(
        "Add items, creating the filter when it is missing (BF.INSERT).",
        {"key": BLOOM_KEY, "items": BLOOM_ITEMS, "capacity": _nullable(CAPACITY),
         "error": _nullable(ERROR_RATE), "expansion": EXPANSION,
         "nocreate": {"type": "boolean", "default": False},
         "nonscaling": {"type": "boolean", "default": False}},
        BLOOM_ANSWERS, BLOOM_ERRORS),
    "bf.info": Description(
        "A filter's capacity, size, layers, items and expansion (BF.INFO).",
        {"key": BLOOM_KEY}, OBJECT, BLOOM_ERRORS),
    "bf.del": Description(
        "Delete a filter and free its memory: 1, or 0 when there was none.",
        {"key": BLOOM_KEY}, {"type": "integer", "enum": [0, 1]}, BLOOM_ERRORS),
}

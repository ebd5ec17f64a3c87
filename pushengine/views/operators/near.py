"""``near: {lat: $lat, lon: $lon, km: $km}``: the object's ``lat``/``lon``
lie within ``km`` kilometres, great-circle. The store keeps a grid of
one-degree cells (stores/geogrid.py) to answer from."""
from __future__ import annotations

from typing import Any, Callable, Hashable

from pushengine.views.geogrid import GeoGrid, number
from pushengine.views.geo import distance_km
from pushengine.views.operators.base import (
    Condition, Move, Operator, Predicate, Ref, StoreIndex, ViewDefinitionError, bad_param,
    finite, parse_operand, register, resolve)

LIMITS = {"lat": (-90, 90), "lon": (-180, 180), "km": (0, 20040)}


class GeoIndex(GeoGrid):
    """The grid as a store index."""

    def move_many(self, moves: list[Move]) -> None:
        for id_, old, new in moves:
            self.move(id_, old, new)

    def candidates(self, condition: Condition, values: dict[str, Any]) -> list[dict] | None:
        lat, lon, km = (resolve(condition.operand[k], values) for k in ("lat", "lon", "km"))
        if not all(number(v) for v in (lat, lon, km)):
            return None
        return self.buckets(lat, lon, km)


@register
class Near(Operator):
    name = "near"
    cost = 2
    own_key = True
    roles = ("lat", "lon", "km")

    def parse(self, field: str | None, spec: object, view: str) -> Condition:
        if not isinstance(spec, dict) or set(spec) != {"lat", "lon", "km"}:
            raise ViewDefinitionError(f"{view}: 'near' needs lat, lon and km")
        return Condition("near", None, {k: parse_operand(v) for k, v in spec.items()})

    def refs(self, condition: Condition) -> list[tuple[Ref, str]]:
        return [(v, k) for k, v in condition.operand.items() if isinstance(v, Ref)]

    def check(self, name: str, role: str, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite(value):
            raise bad_param(name, "a number")
        low, high = LIMITS[role]
        if not low <= value <= high or (role == "km" and value == 0):
            raise bad_param(name, f"between {low} and {high}")
        return float(value)

    def bind(self, condition: Condition, values: dict[str, Any]) -> Predicate:
        operand = condition.operand
        lat: float = resolve(operand["lat"], values)
        lon: float = resolve(operand["lon"], values)
        km: float = resolve(operand["km"], values)

        def near(obj: dict) -> bool:
            a, b = obj.get("lat"), obj.get("lon")
            if not (number(a) and number(b)):
                return False
            return distance_km(lat, lon, a, b) <= km
        return near

    def store_index(self,
                    condition: Condition) -> tuple[Hashable, Callable[[], StoreIndex]] | None:
        return "geo", GeoIndex

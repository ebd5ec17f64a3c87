"""A grid of one-degree cells over the objects of one type, for ``near``.

The in-process store answers a ``near`` view from the cells its circle
touches instead of scanning every object of the type.
"""
from __future__ import annotations

from math import asin, cos, degrees, floor, pi, radians, sin
from typing import Hashable, Literal, TypeGuard

from pushengine.views.geo import EARTH_RADIUS_KM

GEO_MAX_CELLS = 4_000    # a wider circle scans the whole type instead
GEO_MARGIN = 0.01        # degrees added around a circle's bounding box


# a one-degree cell (latitude, longitude), or "odd": numbers outside the globe
Cell = tuple[int, int] | Literal["odd"]


def number(value: object) -> TypeGuard[int | float]:
    """A JSON number (not a boolean)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class GeoGrid:
    """The objects of one type by one-degree cell of their ``lat``/``lon``.
    Objects without numeric coordinates never pass ``near`` and are left out;
    numbers outside the globe's ranges are kept aside and always candidates."""

    def __init__(self) -> None:
        self.cells: dict[tuple[int, int], dict[Hashable, dict]] = {}
        self.odd: dict[Hashable, dict] = {}

    @staticmethod
    def cell(obj: dict) -> Cell | None:
        lat, lon = obj.get("lat"), obj.get("lon")
        if not (number(lat) and number(lon)):
            return None
        try:
            if -90 <= lat <= 90 and -180 <= lon <= 180:
                return floor(lat), (floor(lon) + 180) % 360 - 180
        except (OverflowError, ValueError):  # pragma: no cover - refused on input
            pass
        return "odd"

    def move(self, id_: Hashable, old: dict | None, new: dict | None) -> None:
        was = self.cell(old) if old is not None else None
        now = self.cell(new) if new is not None else None
        if was is not None and was != now:
            if was == "odd":
                self.odd.pop(id_, None)
            else:
                bucket = self.cells.get(was)
                if bucket is not None:
                    bucket.pop(id_, None)
                    if not bucket:
                        del self.cells[was]
        if now is not None and new is not None:
            (self.odd if now == "odd" else self.cells.setdefault(now, {}))[id_] = new

    def buckets(self, lat: float, lon: float, km: float) -> list[dict[Hashable, dict]] | None:
        """The buckets (id -> object) holding every object that may lie
        within ``km`` of (lat, lon); None when the circle is too wide for the
        grid to help."""
        r = km / EARTH_RADIUS_KM                 # angular radius
        if r >= pi / 2:
            return None
        dlat = degrees(r) + GEO_MARGIN
        low, high = max(lat - dlat, -90.0), min(lat + dlat, 90.0)
        if low <= -90.0 or high >= 90.0:
            columns = None                       # the circle holds a pole
        else:
            # widest longitude offset of a circle that holds no pole
            dlon = degrees(asin(min(1.0, sin(r) / cos(radians(lat))))) + GEO_MARGIN
            columns = None if dlon >= 180 else range(floor(lon - dlon), floor(lon + dlon) + 1)
        rows = range(floor(low), floor(high) + 1)
        width = 360 if columns is None else len(columns)
        if len(rows) * width > GEO_MAX_CELLS:
            return None
        wrapped = range(-180, 180) if columns is None else \
            {(c + 180) % 360 - 180 for c in columns}
        found = [self.odd] if self.odd else []
        cells = self.cells
        for row in rows:
            for column in wrapped:
                bucket = cells.get((row, column))
                if bucket:
                    found.append(bucket)
        return found

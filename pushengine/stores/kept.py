"""Objects of some types kept from the feed and read by id: what a store
that asks elsewhere for views (an HTTP backend, PostgreSQL) keeps itself
for the sessionless profile methods (the types with ``public`` fields)."""
from __future__ import annotations

from typing import Hashable, Iterable, Sequence

from pushengine.core.changes import DELETE, Change


class KeptObjects:
    """The last state of every object of the ``types`` seen on the feed."""

    def __init__(self, types: Iterable[str] = ()) -> None:
        self.types = frozenset(types)
        self.objects: dict[str, dict[Hashable, dict]] = {}

    def apply_changes(self, changes: Sequence[Change]) -> None:
        if not self.types:
            return
        for c in changes:
            if c.type in self.types:
                by_id = self.objects.setdefault(c.type, {})
                if c.action == DELETE:
                    by_id.pop(c.id, None)
                else:
                    by_id[c.id] = c.obj

    def get(self, type_: str, id_: Hashable) -> dict | None:
        """A kept object by type and id, or None."""
        return self.objects.get(type_, {}).get(id_)

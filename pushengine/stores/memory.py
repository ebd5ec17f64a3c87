"""The in-process object store: every object seen on the feed, by type and id.

It answers a new view's initial state by scanning the objects of the view's
type; it can be seeded from a JSON-lines file of change messages or objects.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from twisted.internet.defer import Deferred, succeed

from pushengine.changes import UPSERT, Change, MalformedChange, changes_from_json


class MemoryStore:
    def __init__(self, id_fields: dict[str, str] | None = None) -> None:
        self.id_fields = id_fields or {}
        self.objects: dict[str, dict[Any, dict]] = {}

    def apply_changes(self, changes: Sequence[Change]) -> None:
        for c in changes:
            by_id = self.objects.setdefault(c.type, {})
            if c.action == UPSERT:
                by_id[c.id] = c.obj
            else:
                by_id.pop(c.id, None)

    def query(self, view: Any, params: dict[str, Any], limit: int) -> Deferred:
        from pushengine.views.query import Query
        from pushengine.views.spec import BoundView
        query = Query(BoundView(view, dict(params), limit))
        query.load(self.objects.get(view.type, {}).items())
        return succeed(query.top(len(query)))

    def get(self, type_: str, id_: Any) -> dict | None:
        return self.objects.get(type_, {}).get(id_)

    def __len__(self) -> int:
        return sum(len(v) for v in self.objects.values())

    def seed(self, path: str | Path, default_type: str = "Stream") -> int:
        """Load a JSON-lines file: each line a change message, or a bare object
        of ``default_type``. Returns the number of objects loaded."""
        count = 0
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    data = json.loads(line)
                except ValueError:
                    raise MalformedChange(f"{path}:{number}: not JSON") from None
                if isinstance(data, dict) and "action" not in data:
                    data = {"type": default_type, "action": "upsert", "obj": data}
                changes, errors = changes_from_json(data, self.id_fields)
                if errors:
                    raise MalformedChange(f"{path}:{number}: {errors[0]}")
                self.apply_changes(changes)
                count += len(changes)
        return count

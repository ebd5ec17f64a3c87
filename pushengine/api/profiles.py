"""Public profiles: ``user.public_profile`` and ``user.public_profiles`` (SPEC section 11).

Users arrive on the feed like any other object (``{"type": "User", ...}``) and
the store keeps them. A profile is the User object cut down to the fields the
views file declares public for the type (``types: {User: {id: id, public:
[id, name, avatar]}}``); nothing else of a User is ever answered. No session
is needed: profiles are what any visitor of the site may see.
"""
from __future__ import annotations

import re
from typing import Any

from pushengine.core.changes import valid_id
from pushengine.core.errors import BadParams

PROFILE_TYPE = "User"
MAX_IDS = 100
_DIGITS = re.compile(r"^(0|[1-9][0-9]{0,15})$")


def _other_form(id_: Any) -> Any:
    """The same id as the other JSON type (340699 <-> "340699"), or None:
    a user id read from a URL is a string, the feed's is often a number."""
    if isinstance(id_, str):
        if _DIGITS.match(id_):
            number = int(id_)
            return number if valid_id(number) else None
        return None
    if isinstance(id_, int) and not isinstance(id_, bool) and id_ >= 0:
        return str(id_)
    return None


class Profiles:
    """The public fields of one type's objects, read from the object store."""

    def __init__(self, store: Any, fields: list[str], type_: str = PROFILE_TYPE,
                 max_ids: int = MAX_IDS) -> None:
        self.store = store
        self.type = type_
        self.fields = list(fields)
        self.max_ids = max_ids
        self.asked = 0  # profiles asked for (metrics)

    def _object(self, id_: Any) -> dict | None:
        get = getattr(self.store, "get", None)
        if get is None:
            return None
        obj = get(self.type, id_)
        if obj is None:
            other = _other_form(id_)
            if other is not None:
                obj = get(self.type, other)
        return obj if isinstance(obj, dict) else None

    def profile(self, id_: Any) -> dict | None:
        """The public fields that the object has (in the declared order), or
        None when there is no such object."""
        self.asked += 1
        obj = self._object(id_)
        if obj is None:
            return None
        return {f: obj[f] for f in self.fields if f in obj}

    counter_names = ("asked",)

    def stats(self) -> dict[str, int]:
        """For /metrics."""
        return {"asked": self.asked}

    # -- the methods -------------------------------------------------------------
    def public_profile(self, user_id: Any) -> dict | None:
        if not valid_id(user_id):
            raise BadParams("user_id must be a user id: a string of 1 to 256 characters "
                            "or an integer")
        return self.profile(user_id)

    def public_profiles(self, user_ids: Any) -> list[dict | None]:
        if not isinstance(user_ids, list):
            raise BadParams("user_ids must be a list of user ids")
        if len(user_ids) > self.max_ids:
            raise BadParams(f"at most {self.max_ids} user ids at once")
        for i, id_ in enumerate(user_ids):
            if not valid_id(id_):
                raise BadParams(f"user_ids[{i}] must be a user id: a string of 1 to 256 "
                                f"characters or an integer")
        return [self.profile(id_) for id_ in user_ids]

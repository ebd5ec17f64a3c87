"""``visible_to: $session.user``: the object is public, owned by the user
(``user_id``) or lists the user in ``allowed_users``. Privacy fails closed:
only ``public: true`` is public. Routes by the users who may see an object
(every query, for a public one)."""
from __future__ import annotations

from typing import Any, Hashable

from pushengine.views.operators.base import (
    ALL, SESSION_USER, Condition, Predicate, SessionOperand, register, resolve)
from pushengine.views.values import index_key, json_equal


def is_private(obj: dict) -> bool:
    """Anything but ``public: true`` (false, 0, "false", null, missing) is private."""
    return obj.get("public") is not True


def visible_to(obj: dict, user: object) -> bool:
    """Public, owned by the user, or listing the user in ``allowed_users``."""
    if obj.get("public") is True:
        return True
    if user is None:
        return False
    if json_equal(obj.get("user_id"), user):
        return True
    allowed = obj.get("allowed_users")
    return isinstance(allowed, list) and any(json_equal(u, user) for u in allowed)


@register
class VisibleTo(SessionOperand):
    name = "visible_to"
    session_value = SESSION_USER
    roles = ("visible_to",)
    takes_session_user = True
    route_rank = 4

    def bind(self, condition: Condition, values: dict[str, Any]) -> Predicate:
        user = resolve(condition.operand, values)
        return lambda obj: visible_to(obj, user)

    def query_keys(self, condition: Condition, values: dict[str, Any]) -> set[Hashable]:
        return {index_key(resolve(condition.operand, values))}

    def object_keys(self, condition: Condition, obj: dict) -> set[Hashable] | None:
        if not is_private(obj):
            return ALL
        keys: set[Hashable] = {index_key(obj.get("user_id"))}
        allowed = obj.get("allowed_users")
        if isinstance(allowed, list):
            keys.update(index_key(u) for u in allowed)
        return keys

"""The ``admin.*`` methods as the API's OpenRPC document describes them
(``pushengine.api.openrpc``), merged into the document by the node."""
from __future__ import annotations

from pushengine.api.openrpc import (
    COUNT, OBJECT, SID, SUBSCRIBED, Description, _nullable, _string)
from pushengine.api.rpc import MAX_ITEMS

ADMIN_ERRORS = (1001, 1003, 1007)
ADMIN_KEY = _nullable(_string("the admin key (null: the Bearer token of the request)"))

DESCRIPTIONS: dict[str, Description] = {
    "admin.subscribe": Description(
        "Subscribe a session to every node's statistics.", {"sid": SID, "key": ADMIN_KEY},
        SUBSCRIBED, ADMIN_ERRORS, result_name="subscribed"),
    "admin.unsubscribe": Description(
        "End a session's subscription to the node statistics.",
        {"sid": SID, "key": ADMIN_KEY}, {"type": "boolean"}, ADMIN_ERRORS),
    "admin.stats": Description(
        "Every node's statistics, now.", {"key": ADMIN_KEY},
        {"type": "array", "items": OBJECT}, (1003, 1007), result_name="nodes"),
    "admin.publish": Description(
        "Publish one change or a list, as POST /api/publish does.",
        {"key": ADMIN_KEY, "changes": {"oneOf": [OBJECT, {"type": "array", "items": OBJECT,
                                                          "maxItems": MAX_ITEMS}]}},
        {"type": "object", "required": ["accepted"],
         "properties": {"accepted": COUNT}}, (1003, 1007, -32602, -32603)),
    "admin.session": Description(
        "One session's node, user, delivery and subscriptions; null when unknown.",
        {"key": ADMIN_KEY, "sid": SID}, _nullable(OBJECT), (1003, 1007, -32602),
        result_name="session"),
    "admin.disconnect": Description(
        "End every session of a user on this node and, through the change feed, on "
        "every node; the number ended on this node.",
        {"key": ADMIN_KEY, "user": {"type": ["string", "integer"],
                                     "description": "the user id, as session.authorize "
                                                    "answers it"}},
        COUNT, (1003, 1007, -32602), result_name="ended"),
}

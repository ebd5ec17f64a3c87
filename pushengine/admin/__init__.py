"""The operator's view (SPEC section 16): ``/admin/`` behind ``--admin-key``.

- ``stats.StatsPublisher``: once a second each node publishes a
  ``pushengine.NodeStats`` object (id: the node id) through the change feed,
  so that with ``--amqp`` every node receives every node's figures.
- ``hub.AdminHub``: the internal view of those objects. It is not a view of
  the views file: the node's sink (``hub.AdminSink``) takes the internal type
  out of every batch before the engine sees it, so no ordinary view, store or
  change counter ever holds one. Sessions enter it only through
  ``admin.subscribe`` with the admin key, and then receive its events like
  any view's (same ``seq`` numbering, every transport).
- ``methods.AdminMethods``: the ``admin.*`` JSON-RPC methods; each checks the
  key (``hmac.compare_digest``), taken from the call's params or from
  ``Authorization: Bearer``, never from a URL.
- ``page.AdminPage``: the static page (``static/admin/``).

docs/admin.md tells the operator's side.
"""
from __future__ import annotations

ADMIN_TYPE = "pushengine.NodeStats"
# the subscription key of the internal view: no view of a views file can
# have it (a view's name is a plain identifier)
ADMIN_VIEW_KEY = "$admin.NodeStats"
# admin.disconnect's message to every node: the user whose sessions end
DISCONNECT_TYPE = "pushengine.Disconnect"

"""The HTTP edge over the transport-free API: one policy (``policy.py``) and
one route table (``routes.py``) read by both fronts, the fast front
(``fastpath.py``) and twisted.web with klein (``app.py``)."""

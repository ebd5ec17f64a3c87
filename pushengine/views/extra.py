"""The ``similar`` extra: numpy and datasketch, which the ``similar``
operator's MinHash LSH needs (views/similarity.py), installed with
``pip install 'pushengine[similar]'``.

The default install goes without them (numpy and scipy, which datasketch
requires, are most of an install's size). Nothing imports them until a
views file declares a ``similar`` view; this module tells whether they are
there without importing them, so that a views file that needs them is
refused at start with the command that installs them (docs/views.md,
"Similar views and the similar extra").
"""
from __future__ import annotations

from importlib.util import find_spec

NAME = "similar"
INSTALL = "pip install 'pushengine[similar]'"
MODULES = ("numpy", "datasketch")


def missing() -> list[str]:
    """The extra's modules this install does not have (none: it is there)."""
    found = []
    for module in MODULES:
        try:
            spec = find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            found.append(module)
    return found


def available() -> bool:
    """Whether ``similar`` views can be served here."""
    return not missing()


def refusal(view: str) -> str:
    """Why ``view`` cannot be served, and how to make it servable."""
    return (f"{view}: 'similar' needs the {NAME} extra ({', '.join(missing())} "
            f"not installed): {INSTALL}")

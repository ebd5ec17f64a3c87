"""Moved to ``pushengine_client.errors`` (the pushengine-client distribution,
client/): this name is the same module, kept for code that imports it."""
import sys

from pushengine_client import errors as _module
from pushengine_client.errors import *  # noqa: F401,F403

sys.modules[__name__] = _module

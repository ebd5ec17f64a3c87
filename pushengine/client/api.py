"""Moved to ``pushengine_client.api`` (the pushengine-client distribution,
client/): this name is the same module, kept for code that imports it."""
import sys

from pushengine_client import api as _module
from pushengine_client.api import *  # noqa: F401,F403

sys.modules[__name__] = _module

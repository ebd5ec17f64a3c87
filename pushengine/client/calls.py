"""Moved to ``pushengine_client.calls`` (the pushengine-client distribution,
client/): this name is the same module, kept for code that imports it."""
import sys

from pushengine_client import calls as _module
from pushengine_client.calls import *  # noqa: F401,F403

sys.modules[__name__] = _module

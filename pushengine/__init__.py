"""pushengine: a realtime push engine on Twisted."""

__version__ = "0.1.0"

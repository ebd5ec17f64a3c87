"""The core: changes, events, the session's event log, sessions, the engine.

It knows no transport and no outside service. It talks to the views through
the protocols of :mod:`pushengine.core.interfaces`; everything above it
(views, the API, transports, adapters) may import it, it imports none of them.
"""

"""The HTTP adapter: klein routes over the transport-free API."""

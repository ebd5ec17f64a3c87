"""The webhook adapter: a signed POST to the backend per session event."""

"""The Prometheus adapter: ``/metrics`` in the text format (prometheus_client)."""

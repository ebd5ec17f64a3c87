"""Traces (SPEC 21): the node's ``core.tracing.Tracer`` on OpenTelemetry.

``otel.py`` is the one module that imports OpenTelemetry (the ``otel``
extra); ``app/`` imports it only with ``--otlp-endpoint``.
"""

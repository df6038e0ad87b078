"""OpenTelemetry GenAI telemetry (OTLP JSON) read as memory events: see docs/otel.md."""

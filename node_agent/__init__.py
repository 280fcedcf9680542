"""Per-host agent (C4a): assignments for the shim, telemetry batching, path probes."""

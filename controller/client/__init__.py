"""The `c4` CLI's client of a running controller (kubectl style): it speaks only HTTP to the
API, never to the database (import-linter checks it)."""

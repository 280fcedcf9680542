"""Benchmarks that print comparable figures; see bench/README.md."""

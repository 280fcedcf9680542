"""Planner benchmarks: c4 vs ECMP vs a naive greedy vs the proven bound, and a scale series."""

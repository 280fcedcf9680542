"""Tests of the pure C4D core and its simulator."""

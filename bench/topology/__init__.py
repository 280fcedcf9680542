"""Topology benchmark: PUT then GET of a generated clos3 fabric over real HTTP."""

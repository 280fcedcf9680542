"""The fabric model: canonical names, validation, generators, the graph view and hash models.

Pure: takes and returns values from `controller.domain`; no I/O.
"""

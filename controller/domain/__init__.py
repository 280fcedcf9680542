"""Plain value types shared by every part of c4.

This package does no I/O and imports nothing outside the standard library.
"""

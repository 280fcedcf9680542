"""Diagnosis benchmark: detection latency, classification and false alarms of C4D."""

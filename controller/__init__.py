"""c4: traffic-engineering and fault-diagnosis controller for AI training clusters."""

__version__ = "0.1.0"

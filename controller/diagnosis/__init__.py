"""C4D: detectors over bounded telemetry windows (pure; every call takes `now_us`).

Entry point: `Diagnoser` (ingest records, evaluate with the jobs' planned routes, get alarm
events back as values). This package opens no socket, file or session, reads no clock and no
environment variable, and imports nothing outside the standard library and `controller.domain`.
"""

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.engine import Diagnoser
from controller.diagnosis.routes import JobRoutes, PlannedFlow

__all__ = ["Diagnoser", "DiagnosisConfig", "JobRoutes", "PlannedFlow"]

"""Logs a person can follow: one structured line per event that matters, and the process's
log format (`C4_LOG_FORMAT`: `text` by default, `json` for one object per line).

An event line names the event and its figures, e.g. in text::

    2025-11-29T15:26:52.000000Z INFO  alarm.opened alarm=a-000017 job=run7 kind=comm_slow
        first_suspect=nic_port:host5:mlx5_0:p0 summary="connection 4->5 at 20% of ..."

and in JSON ``{"time": "...", "level": "info", "logger": "c4.events", "event": "alarm.opened",
"alarm": "a-000017", ...}``. Other log records (warnings, uvicorn's access lines) get the same
layout with a `message`. Lines for changes made in a transaction (`after_commit`) are written
only once it commits, so the log never tells of a change that was rolled back.

Never logged: tokens, webhook secrets, and a URL's user, password or query (`safe_url`).
Escaped in every line (`printable`): control characters (ESC, NUL, new lines), bidi controls and
zero-width characters a name or message may carry, so a log line shows what was sent and can
neither forge another line nor reorder what a terminal displays.
"""

from __future__ import annotations

import json
import logging
import sys
import unicodedata
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import event as sa_event
from sqlalchemy.orm import Session

from controller.services.clock import iso8601

EVENTS_LOGGER = "c4.events"
# Libraries that log whole request URLs at INFO (a webhook URL may hold a user, a password or
# a token): held at WARNING wherever c4 configures logging or sends webhooks.
SECRET_BEARING_LOGGERS = ("httpx", "httpcore")
log = logging.getLogger(EVENTS_LOGGER)
_PENDING = "c4_event_lines"


def line(event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event line now."""
    log.log(level, event, extra={"c4_event": event, "c4_fields": fields})


def after_commit(session: Session, event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event line when `session`'s transaction commits; never if it rolls back."""
    pending: list[tuple[str, int, dict[str, Any]]] | None = session.info.get(_PENDING)
    if pending is None:
        pending = session.info[_PENDING] = []
        sa_event.listen(session, "after_commit", _flush, once=True)
        sa_event.listen(session, "after_rollback", _drop, once=True)
    pending.append((event, level, fields))


def _flush(session: Session) -> None:
    for event, level, fields in session.info.pop(_PENDING, []):
        line(event, level, **fields)


def _drop(session: Session) -> None:
    session.info.pop(_PENDING, None)


def quiet_secret_bearing_loggers() -> None:
    for name in SECRET_BEARING_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def safe_url(url: str) -> str:
    """`url` without user, password, query or fragment (they may hold credentials)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return "<unparseable url>"


# --- formats -----------------------------------------------------------------------------


def _record_fields(record: logging.LogRecord) -> tuple[str | None, Mapping[str, Any]]:
    return getattr(record, "c4_event", None), getattr(record, "c4_fields", {})


_UNSAFE_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


def printable(text: str) -> str:
    r"""`text` with every character a terminal or log reader would act on or hide escaped as
    `\xNN` or `\uNNNN` (see the module docstring); everything else as it is.

    >>> printable("job\x1b[2Jname\u202egpj.exe")
    'job\\x1b[2Jname\\u202egpj.exe'
    """
    if text.isascii() and text.isprintable():
        return text
    out = []
    for ch in text:
        if ch != " " and unicodedata.category(ch) in _UNSAFE_CATEGORIES:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def _text_value(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, list | tuple):
        text = ",".join(str(v) for v in value)
    elif value is None:
        text = "-"
    else:
        text = str(value)
    if not text or any(c in text for c in ' "=\\\n\t'):
        return json.dumps(text)  # escapes every control character and, as ASCII, every other one
    return printable(text)


class TextFormatter(logging.Formatter):
    """`TIME LEVEL event key=value ...` for events; `TIME LEVEL logger: message` otherwise."""

    def format(self, record: logging.LogRecord) -> str:
        when = iso8601(int(record.created * 1_000_000))
        event, fields = _record_fields(record)
        if event is not None:
            body = " ".join([event, *(f"{k}={_text_value(v)}" for k, v in fields.items())])
        else:
            body = f"{record.name}: {printable(record.getMessage())}"
        out = f"{when} {record.levelname:<5} {body}"
        if record.exc_info:
            out += "\n" + self.formatException(record.exc_info)
        return out


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, then `event` and its fields, or `message`."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"time": iso8601(int(record.created * 1_000_000)),
                               "level": record.levelname.lower(), "logger": record.name}
        event, fields = _record_fields(record)
        if event is not None:
            out["event"] = event
            out.update({k: v for k, v in fields.items() if k not in out})
        else:
            out["message"] = record.getMessage()
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


FORMATTERS: dict[str, type[logging.Formatter]] = {"text": TextFormatter, "json": JsonFormatter}


def configure(fmt: str = "text", level: str = "info") -> None:
    """Send every log record (c4's and uvicorn's) to stderr in format `fmt`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FORMATTERS[fmt]())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    quiet_secret_bearing_loggers()


def uvicorn_log_config(fmt: str = "text", level: str = "info") -> dict[str, Any]:
    """A `logging.config` dict for `uvicorn.run(log_config=...)`: uvicorn's own records (start,
    access lines) in the same format as c4's, all on stderr."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"c4": {"()": FORMATTERS[fmt]}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "c4", "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {**{name: {"handlers": [], "propagate": True, "level": level.upper()}
                       for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
                    **{name: {"level": "WARNING"} for name in SECRET_BEARING_LOGGERS}},
    }

"""Logging set-up: stdlib logging, configured once in each __main__, with the request id on every line."""
from __future__ import annotations

import contextvars
import logging

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

LOG_FORMAT = "%(asctime)s %(levelname)s %(stage)s %(name)s [req=%(request_id)s] %(message)s"


class _ContextFilter(logging.Filter):
    """Stamps every record with the stage and the request id of the task that logs it."""

    def __init__(self, stage: str) -> None:
        super().__init__()
        self._stage = stage

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        record.stage = self._stage
        return True


# C0 and C1 controls and the Unicode line/paragraph separators: each is a line break to some log reader
_BREAKS = (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)
_CONTROL = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _BREAKS}
_CONTROL |= {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


def escape_field(text: str) -> str:
    """`text` with control characters written as escapes: a request id or message holding a newline must not start
    a line of its own that reads as another record."""
    return text.translate(_CONTROL)


class _EscapingFormatter(logging.Formatter):
    """One record, one line: the message and request id escaped (a traceback, appended after, keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_field(record.message)
        record.request_id = escape_field(str(record.request_id))
        return super().formatMessage(record)


def configure_logging(stage: str, level: str = "INFO") -> None:
    """Installs one stderr handler on the root logger; call once, from a process entry point."""
    handler = logging.StreamHandler()
    handler.addFilter(_ContextFilter(stage))
    handler.setFormatter(_EscapingFormatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

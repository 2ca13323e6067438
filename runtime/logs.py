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


def configure_logging(stage: str, level: str = "INFO") -> None:
    """Installs one stderr handler on the root logger; call once, from a process entry point."""
    handler = logging.StreamHandler()
    handler.addFilter(_ContextFilter(stage))
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

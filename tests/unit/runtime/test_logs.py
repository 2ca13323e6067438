"""configure_logging: one stderr handler, the stage and the request id on every line."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from runtime.logs import configure_logging, request_id_var


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


def test_lines_carry_stage_and_request_id(root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("thinker", "debug")
    assert root_logger.level == logging.DEBUG and len(root_logger.handlers) == 1
    log = logging.getLogger("omnimesh.test")
    log.info("no request")
    token = request_id_var.set("req-42")
    try:
        log.warning("inside %s", "a request")
    finally:
        request_id_var.reset(token)
    log.info("explicit", extra={"request_id": "req-7"})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert "INFO thinker omnimesh.test [req=-] no request" in lines[0]
    assert "WARNING thinker omnimesh.test [req=req-42] inside a request" in lines[1]
    assert "[req=req-7] explicit" in lines[2]


def test_each_task_logs_its_own_request_id(root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("gateway")
    log = logging.getLogger("omnimesh.test")

    async def handle(rid: str) -> None:
        request_id_var.set(rid)
        await asyncio.sleep(0)
        log.info("handled")

    async def main() -> None:
        await asyncio.gather(handle("a"), handle("b"))

    asyncio.run(main())
    err = capsys.readouterr().err
    assert "[req=a] handled" in err and "[req=b] handled" in err and "[req=-]" not in err


def test_configuring_twice_keeps_one_handler_and_sets_the_level(root_logger: logging.Logger,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("audio")
    configure_logging("audio", "WARNING")
    assert len(root_logger.handlers) == 1 and root_logger.level == logging.WARNING
    logging.getLogger("x").info("hidden")
    assert capsys.readouterr().err == ""


def test_a_bad_level_is_rejected(root_logger: logging.Logger) -> None:
    with pytest.raises(ValueError):
        configure_logging("vision", "loud")


def test_a_newline_in_a_request_id_or_message_cannot_forge_a_line(root_logger: logging.Logger,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("gateway")
    log = logging.getLogger("omnimesh.test")
    forged = "r1\n2026-01-01 00:00:00,000 INFO gateway auth [req=admin] key accepted"
    token = request_id_var.set(forged)
    try:
        log.info("voice %s refused", "a\r\nb\x1b[2J\u2028c")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        request_id_var.reset(token)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("[req=r1\\n2026-01-01 00:00:00,000 INFO gateway auth [req=admin] key accepted] voice "
                             "a\\r\\nb\\x1b[2J\\u2028c refused")
    assert lines[1].endswith("] failed") and lines[2] == "Traceback (most recent call last):"  # tracebacks keep lines

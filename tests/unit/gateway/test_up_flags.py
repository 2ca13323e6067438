"""`omnimesh up` flags: the log level is checked, upper-cased, and refused with the allowed values when wrong."""
from __future__ import annotations

import argparse

import pytest

from gateway.cli import up


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="omnimesh")
    up.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["up", *argv])


def test_log_level_defaults_to_info_and_is_case_insensitive() -> None:
    assert parse([]).log_level == "INFO"
    assert parse(["--log-level", "debug"]).log_level == "DEBUG"


def test_unknown_log_level_lists_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--log-level", "loud"])
    assert "choose from 'DEBUG', 'INFO', 'WARNING', 'ERROR'" in capsys.readouterr().err

"""`omnimesh chat` with a media path it cannot read: a usage error that names the flag and the path, no traceback,
before any connection is tried."""
from __future__ import annotations

import os

import pytest

from gateway.cli.main import main


@pytest.mark.parametrize("flag", ["--image", "--audio", "--video"])
def test_a_missing_media_file_is_a_usage_error_naming_it(flag: str, tmp_path, capsys) -> None:
    missing = tmp_path / "nope.bin"
    with pytest.raises(SystemExit) as exit_info:
        main(["chat", "--addr", "127.0.0.1:9", flag, str(missing), "hi"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {missing}: no such file" in err
    assert "Traceback" not in err


def test_an_unreadable_media_file_is_a_usage_error(tmp_path, capsys) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    locked = tmp_path / "locked.jpg"
    locked.write_bytes(b"\xff\xd8")
    locked.chmod(0)
    with pytest.raises(SystemExit):
        main(["chat", "--addr", "127.0.0.1:9", "--image", str(locked), "hi"])
    assert f"{locked}: not readable" in capsys.readouterr().err


def test_a_directory_is_not_a_media_file(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["chat", "--addr", "127.0.0.1:9", "--image", str(tmp_path), "hi"])
    assert f"{tmp_path}: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["chat", "info"])
def test_a_missing_ca_file_names_the_flag(command: str, tmp_path) -> None:
    missing = tmp_path / "ca.pem"
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--addr", "127.0.0.1:9", "--ca", str(missing), *(["hi"] if command == "chat" else [])])
    assert exit_info.value.code == f"error: --ca {missing}: No such file or directory"

"""The operator's step-profile window: parsing its environment, a real torch profile of a few CPU steps, and the
engine loop writing one when the environment asks."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from runtime.engine.engine_loop import EngineLoop
from runtime.engine.step_profile import PROFILE_DIR_ENV, PROFILE_STEPS_ENV, StepProfiler, step_profiler_from_env
from tests.unit.engine.test_engine_loop import FakeCore, drain, on_loop


def test_unset_or_empty_asks_for_no_profiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_STEPS_ENV, raising=False)
    assert step_profiler_from_env("thinker") is None
    monkeypatch.setenv(PROFILE_STEPS_ENV, "")
    assert step_profiler_from_env("thinker") is None


def test_skip_count_and_dir_are_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(PROFILE_STEPS_ENV, "20:5")
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path))
    profiler = step_profiler_from_env("thinker")
    assert profiler is not None
    assert (profiler.stage, profiler.skip, profiler.count, profiler.out_dir) == ("thinker", 20, 5, tmp_path)
    monkeypatch.delenv(PROFILE_DIR_ENV)
    monkeypatch.setenv(PROFILE_STEPS_ENV, "0:1")
    profiler = step_profiler_from_env("talker")
    assert profiler is not None and (profiler.skip, profiler.count, profiler.out_dir) == (0, 1, Path("."))


@pytest.mark.parametrize("value", ["5", "5:", ":5", "a:b", "-1:3", "3:-1", "3:0", "1:2:3", "1.5:2", "1,2", "+1:2"])
def test_a_malformed_value_names_the_variable_the_value_and_the_form(monkeypatch: pytest.MonkeyPatch,
                                                                      value: str) -> None:
    monkeypatch.setenv(PROFILE_STEPS_ENV, value)
    with pytest.raises(ValueError) as raised:
        step_profiler_from_env("thinker")
    message = str(raised.value)
    assert PROFILE_STEPS_ENV in message and repr(value) in message and "SKIP:COUNT" in message


def test_count_steps_after_skip_are_profiled_and_written_once(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    profiler = StepProfiler("thinker", skip=1, count=2, out_dir=tmp_path)
    a = torch.ones(32, 32)
    with caplog.at_level(logging.INFO, logger="runtime.engine.step_profile"):
        for _ in range(5):
            with profiler.step():
                torch.mm(a, a)
    text = (tmp_path / f"thinker-pid{os.getpid()}-steps.txt").read_text()
    walls = next(line for line in text.splitlines() if line.startswith("step wall ms:")).split(":")[1].split()
    assert len(walls) == 2 and all(float(ms) >= 0 for ms in walls)
    assert "steps: 2" in text and "by CPU self time:" in text and "aten::mm" in text
    assert "steps 1..2" in text
    assert (tmp_path / f"thinker-pid{os.getpid()}-trace.json.gz").stat().st_size > 0
    written = [r.getMessage() for r in caplog.records if "written to" in r.getMessage()]
    assert len(written) == 1 and str(tmp_path / f"thinker-pid{os.getpid()}-steps.txt") in written[0]


def test_a_write_failure_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the profile's directory is a file: every write fails
    profiler = StepProfiler("talker", skip=0, count=1, out_dir=blocked)
    with caplog.at_level(logging.ERROR, logger="runtime.engine.step_profile"):
        for _ in range(2):
            with profiler.step():
                torch.mm(torch.ones(4, 4), torch.ones(4, 4))
    assert any("writing" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)


def test_the_engine_loop_writes_a_profile_when_the_environment_asks(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    monkeypatch.setenv(PROFILE_STEPS_ENV, "2:3")
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path))
    core = FakeCore()
    loop = EngineLoop(core)

    async def main() -> list[object]:
        return await drain(loop.submit(1, 8))

    assert on_loop(loop, main) == [f"1:{i}" for i in range(8)]
    text = (tmp_path / f"talker-pid{os.getpid()}-steps.txt").read_text()
    assert "steps: 3" in text and "steps 2..4" in text and "talker step" in text


def test_no_environment_no_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(PROFILE_STEPS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    loop = EngineLoop(FakeCore())

    async def main() -> list[object]:
        return await drain(loop.submit(1, 3))

    assert on_loop(loop, main) == ["1:0", "1:1", "1:2"]
    assert list(tmp_path.iterdir()) == []

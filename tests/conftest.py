"""Session-wide fixtures: the demo checkpoint, the transformers reference model on it, and the `gpu` marker."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from runtime.checkpoint.demo_cache import copy_demo_checkpoint
from runtime.checkpoint.hf_compat import apply_talker_audio_config_fix


@pytest.fixture(scope="session")
def demo_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed-0 demo checkpoint in a session tmp dir (copied from a build cache; built on first use)."""
    return copy_demo_checkpoint(tmp_path_factory.mktemp("demo_ckpt"), seed=0)


@pytest.fixture(scope="session")
def hf_omni(demo_ckpt: Path) -> Any:
    """The demo checkpoint loaded in transformers: fp32, eval, sdpa, talker audio_config fix applied. Do not mutate."""
    transformers = pytest.importorskip("transformers")
    model = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        demo_ckpt, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    apply_talker_audio_config_fix(model.config)
    return model


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skips `@pytest.mark.gpu` tests on machines without CUDA."""
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def asr_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed-0 Qwen3-ASR demo checkpoint (`-hf` layout) in a session tmp dir, copied from its build cache."""
    import shutil

    from runtime.checkpoint.asr.demo_cache import cached_asr_demo_checkpoint

    out = tmp_path_factory.mktemp("asr_ckpt")
    shutil.copytree(cached_asr_demo_checkpoint(0), out, dirs_exist_ok=True)
    return out


@pytest.fixture(scope="session")
def hf_asr(asr_ckpt: Path) -> Any:
    """The Qwen3-ASR demo checkpoint in transformers: fp32, eval, sdpa. Do not mutate."""
    transformers = pytest.importorskip("transformers")
    return transformers.Qwen3ASRForConditionalGeneration.from_pretrained(
        asr_ckpt, dtype=torch.float32, attn_implementation="sdpa").eval()


def _qwen3_5_copy(tmp_path_factory: pytest.TempPathFactory, moe: bool) -> Path:
    import shutil

    from runtime.checkpoint.qwen3_5.demo_cache import cached_qwen3_5_demo_checkpoint

    out = tmp_path_factory.mktemp("qwen3_5_moe_ckpt" if moe else "qwen3_5_ckpt")
    shutil.copytree(cached_qwen3_5_demo_checkpoint(0, moe=moe), out, dirs_exist_ok=True)
    return out


@pytest.fixture(scope="session")
def qwen3_5_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed-0 dense Qwen3.5 demo checkpoint in a session tmp dir, copied from its build cache."""
    return _qwen3_5_copy(tmp_path_factory, moe=False)


@pytest.fixture(scope="session")
def qwen3_5_moe_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed-0 MoE Qwen3.5 demo checkpoint in a session tmp dir, copied from its build cache."""
    return _qwen3_5_copy(tmp_path_factory, moe=True)


@pytest.fixture(autouse=True)
def _torch_threads_restored() -> Any:
    """A test that builds a stage in its own process (runtime/stage_device.py caps torch's threads) must not leave
    later tests' in-process references summing in another order than the stage processes they are compared with."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)

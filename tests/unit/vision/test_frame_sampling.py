"""Our video frame choice equals the reference processor's `sample_frames` with fps."""
from __future__ import annotations

import ast
import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gateway.media.frame_sampling import reference_frame_indices

CASES = [(30, 10.0, 2.0), (25, 10.0, 2.0), (3, 1.0, 2.0), (20, 10.0, 4.0), (9, 30.0, 2.0), (240, 24.0, 2.0),
         (7, 7.0, 2.0), (1000, 29.97, 2.0), (61, 30.0, 1.0), (5000, 25.0, 2.0)]


def reference_sample_frames():
    """transformers' own `Qwen2VLVideoProcessor.sample_frames`, taken from its source: importing that module needs
    torchvision, which this machine cannot load beside its torch build."""
    root = Path(importlib.util.find_spec("transformers").submodule_search_locations[0])
    tree = ast.parse((root / "models" / "qwen2_vl" / "video_processing_qwen2_vl.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Qwen2VLVideoProcessor")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "sample_frames")
    module = ast.Module(body=[ast.ImportFrom("__future__", [ast.alias("annotations")], 0), fn], type_ignores=[])
    namespace = {"math": math, "torch": torch}
    exec(compile(ast.fix_missing_locations(module), "sample_frames", "exec"), namespace)
    return namespace["sample_frames"]


@pytest.mark.parametrize("total,source_fps,fps", CASES)
def test_indices_equal_the_reference_processor(total: int, source_fps: float, fps: float) -> None:
    fake = SimpleNamespace(num_frames=None, fps=None, temporal_patch_size=2, min_frames=4, max_frames=768)
    metadata = SimpleNamespace(total_num_frames=total, fps=source_fps)
    ref = reference_sample_frames()(fake, metadata, fps=fps).tolist()
    assert reference_frame_indices(total, source_fps, fps, 4, 768, 2) == ref


def test_a_clip_shorter_than_one_temporal_patch_has_no_reference_choice() -> None:
    assert reference_frame_indices(1, 10.0, 2.0, 4, 768, 2) is None

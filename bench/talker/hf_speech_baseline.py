"""Text->speech through transformers' `generate` (thinker, talker, Code2Wav) on the same dims: the ratio's baseline.

transformers speaks one request at a time and returns the waveform at the end, so its time to first audio is the
whole request; audio-s/s is audio produced over wall time at batch 1 (the mesh's c=1 workload). The model is built
on the device from the mesh checkpoint's config and drawn as bench/talker/random_checkpoint.py draws it (std 0.02,
norm gains 1: transformers' own init can overflow the talker's sampling at these dims), the talker samples with
the model's defaults, and both decoders are held to exact lengths (min = max new tokens), so every request does
the same work as the mesh's. (Loading the checkpoint itself would need `accelerate` for a device map, and
staging 68 GB through host memory beside the /dev/shm copy does not fit the GPU machine.)
"""
from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import torch

from runtime.checkpoint import token_ids as T
from bench.talker.random_checkpoint import STD
from runtime.checkpoint.hf_compat import apply_talker_audio_config_fix

SAMPLE_RATE = 24_000


def speech_prompt(index: int, words: int = 12) -> list[int]:
    """A system turn, a user turn of distinct word ids and the assistant header, as the chat template lays them."""
    body = list(range(1000 + 37 * index, 1000 + 37 * index + words))
    return [T.IM_START, T.SYSTEM, T.NEWLINE, 1000, 1001, T.IM_END, T.NEWLINE,
            T.IM_START, T.USER, T.NEWLINE, *body, T.IM_END, T.NEWLINE, T.IM_START, T.ASSISTANT, T.NEWLINE]


def hf_speech(config: dict[str, Any], device: torch.device, dtype: torch.dtype, requests: int, text_tokens: int,
              frames: int, voice: str = "ethan", seed: int = 0) -> dict[str, Any]:
    """`requests` sequential `generate` calls after one warm-up: audio-s/s, end-to-end seconds, real-time factor."""
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3OmniMoeForConditionalGeneration._from_config(
            Qwen3OmniMoeConfig.from_dict(config), dtype=dtype, attn_implementation="sdpa")
    apply_talker_audio_config_fix(model.config)
    model.eval().requires_grad_(False)
    gen = torch.Generator(device=device).manual_seed(seed)
    for name, p in model.named_parameters():
        p.fill_(1.0) if name.endswith("norm.weight") else p.normal_(0.0, STD, generator=gen)
    rows = []
    try:
        for index in range(requests + 1):  # the first is a warm-up
            ids = torch.tensor([speech_prompt(index)], device=device)
            _sync(device)
            t0 = time.perf_counter()
            with torch.inference_mode():
                _, wav = model.generate(
                    input_ids=ids, attention_mask=torch.ones_like(ids), speaker=voice,
                    thinker_max_new_tokens=text_tokens, thinker_min_new_tokens=text_tokens, thinker_do_sample=False,
                    talker_max_new_tokens=frames, talker_min_new_tokens=frames,
                )  # fmt: skip
            _sync(device)
            if index:
                seconds = time.perf_counter() - t0
                rows.append({"e2e_s": seconds, "audio_s": wav.numel() / SAMPLE_RATE})
    finally:
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    wall = sum(r["e2e_s"] for r in rows)
    rtf = [r["e2e_s"] / r["audio_s"] for r in rows if r["audio_s"] > 0]
    return {"requests": requests, "text_tokens": text_tokens, "frames": frames,
            "audio_s_per_s": sum(r["audio_s"] for r in rows) / wall,
            "first_audio_ms_p50": statistics.median(r["e2e_s"] for r in rows) * 1e3,
            "rtf_p50": statistics.median(rtf) if rtf else None, "raw": rows}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)

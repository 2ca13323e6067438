"""Seeded random initialisation of every demo parameter, scaled so each layer visibly changes its input.

Why not the transformers init: it leaves the talker experts uninitialised (`torch.empty`, so not even
deterministic), sets every norm to ones, every bias and router to zero and LayerScale to 0.01, and its
std 0.02 makes every layer a near no-op on the residual stream. A parity test against such weights
would pass with a missing norm, a dropped bias or a wrong attention mask. Here every tensor is random
and every block contributes at the scale of its input.
"""
from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

# Norm gains and biases: visibly non-trivial but mild enough to keep activations at unit scale.
NORM_GAIN_STD = 0.1
BIAS_STD = 0.05
# SnakeBeta keeps alpha/beta in log space; 0 means alpha = beta = 1.
SNAKE_LOG_STD = 0.1
# LayerScale / ConvNeXt gamma: the real init (0.01 / 1e-6) silences the branch; 0.1 keeps it audible.
RESIDUAL_SCALE = 0.1
EMBEDDING_STD = 1.0
VISION_POS_EMBED_STD = 0.5
# Code2Wav's decoder blocks (SnakeBeta + residual units) grow the signal ~2.4x per block at unit gain and the
# waveform ends clamped at +-1 (degenerate for parity); 0.45 keeps |wav| std near 0.1 with no clamping.
CODE2WAV_BLOCK_GAIN = 0.45
# Qwen3.5's RMSNorms scale by (1 + w) and are initialised to w = 0: their gains are drawn around 0, not 1.
ZERO_CENTRED_NORMS = ("Qwen3_5RMSNorm", "Qwen3_5MoeRMSNorm")
# Gated DeltaNet decay g = -exp(A_log) * softplus(a + dt_bias): A ~ 0.37 keeps per-token decay near 0.75, so the
# recurrent state carries several tokens back (a state bug shows) without blowing up.
A_LOG_MEAN = -1.0
A_LOG_STD = 0.3


def fan_in(weight: torch.Tensor, module: nn.Module) -> int:
    """Inputs that feed one output: last dim of linears and fused experts, in-channels x kernel for convs."""
    if isinstance(module, nn.ConvTranspose1d | nn.ConvTranspose2d | nn.ConvTranspose3d):
        # weight: [C_in, C_out / groups, *k]; each output sums C_in * k / stride inputs, k ~ 2 * stride here.
        return max(1, weight.shape[0] * math.prod(weight.shape[2:]) // max(1, math.prod(module.stride)))
    if isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d):
        return math.prod(weight.shape[1:])
    return weight.shape[-1]


def init_parameter(name: str, param: torch.Tensor, module: nn.Module, gen: torch.Generator) -> None:
    """Draws one parameter in place from `gen`; `module` is the module that owns it."""
    leaf = name.rsplit(".", 1)[-1]
    kind = type(module).__name__
    with torch.no_grad():
        noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
        if leaf == "bias":
            value = noise * BIAS_STD
        elif kind in ZERO_CENTRED_NORMS:
            value = noise * NORM_GAIN_STD
        elif leaf == "A_log":
            value = A_LOG_MEAN + noise * A_LOG_STD
        elif leaf == "dt_bias":
            value = 1.0 + noise * NORM_GAIN_STD
        elif param.ndim == 1 and ("Norm" in kind or isinstance(module, nn.LayerNorm)):
            value = 1.0 + noise * NORM_GAIN_STD
        elif leaf in ("alpha", "beta"):
            value = noise * SNAKE_LOG_STD
        elif leaf in ("scale", "gamma"):
            value = RESIDUAL_SCALE * (1.0 + noise * NORM_GAIN_STD)
        elif isinstance(module, nn.Embedding):
            std = VISION_POS_EMBED_STD if name.endswith("pos_embed.weight") else EMBEDDING_STD
            value = noise * std
        elif param.ndim >= 2:
            value = noise / math.sqrt(fan_in(param, module))
            if name.startswith("code2wav.decoder.") and ".block." in name:
                value = value * CODE2WAV_BLOCK_GAIN
        else:
            raise ValueError(f"no init rule for parameter {name} {tuple(param.shape)} of {kind}")
        param.copy_(value.to(param.dtype))


def init_demo_weights(model: nn.Module, seed: int) -> None:
    """Re-draws every parameter of `model` from one generator seeded with `seed`, in `named_parameters` order."""
    gen = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        owner = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        init_parameter(name, param, owner, gen)


def save_demo_model(make: Callable[[], nn.Module], out_dir: Path, seed: int, weights_file: str) -> None:
    """Builds `make()` in fp32 under `seed` (fork_rng: the constructor's own init draws from the global RNG; the
    caller's stream stays untouched), draws every parameter with init_demo_weights, and saves it as `weights_file`
    in `out_dir` (one shard, written beside and moved into place)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = make().to(torch.float32).eval()
    init_demo_weights(model, seed)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        model.save_pretrained(tmp, max_shard_size="100GB")
        shutil.move(str(Path(tmp) / weights_file), out_dir / weights_file)

"""How much each FP8 block linear moves the vision tower's outputs, in exact float32 arithmetic on the CPU.

Every chosen block linear (qkv, proj, fc1, fc2) becomes what the GPU's FP8 linear computes, emulated: its input
rows and its weight rows rounded to e4m3 with one scale each (`quantize_rows_reference`), multiplied back out, then
an fp32 product. The tower runs at the released dims with transformers' init (N(0, 0.02) linears, LayerNorms at 1,
zero biases) on one 448x448 image and is compared with the same tower in plain fp32: the error FP8 brings with no
GPU kernel involved (the H200's FP8 tower on the 60 s video: 9.0% merged, `bench/vision/NOTES.md`).

    PYTHONPATH=.:protos python bench/vision/emulate_fp8_error.py --out bench/results/vision-fp8-emulated-error.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from bench.vision.bench_vision_tower import REAL, TINY, compare_outputs, git_commit, reference_tower  # noqa: E402
from runtime.kernels.fp8_quant import dequantize_rows, quantize_rows_reference  # noqa: E402
from services.vision.model.tower import VisionTower  # noqa: E402

LINEARS = ("qkv", "proj", "fc1", "fc2")
SETS = (("qkv",), ("proj",), ("fc1",), ("fc2",), LINEARS)


class EmulatedFp8Linear(nn.Module):
    """y = q(x)·q(W)ᵀ + b in float32, q() rounding each row to e4m3 with its own scale (as Fp8Linear's operands)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = dequantize_rows(quantize_rows_reference(linear.weight.detach()))
        self.bias = linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dequantize_rows(quantize_rows_reference(x)) @ self.weight.T + self.bias


def emulate(tower: VisionTower, linears: tuple[str, ...]) -> VisionTower:
    for block in tower.blocks:
        for name, owner, attr in (("qkv", block.attn, "qkv"), ("proj", block.attn, "proj"),
                                  ("fc1", block.mlp, "linear_fc1"), ("fc2", block.mlp, "linear_fc2")):
            if name in linears:
                setattr(owner, attr, EmulatedFp8Linear(getattr(owner, attr)))
    return tower


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tiny", action="store_true", help="demo-sized tower (a smoke test)")
    args = p.parse_args(argv)
    cfg = TINY if args.tiny else REAL
    torch.manual_seed(0)
    hf = reference_tower(cfg, torch.device("cpu"), torch.float32)
    if hf is None:
        raise SystemExit("needs transformers (its vision tower's init)")
    state = hf.state_dict()
    side = 28 if not args.tiny else 4
    grids = [(1, side, side)]
    patches = torch.randn(side * side, cfg.patch_dim, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        want = VisionTower.from_state_dict(cfg, state, "cpu", torch.float32)(patches, grids)
        result = {"benchmark": "vision_fp8_emulated_error", "commit": git_commit(),
                  "date": time.strftime("%FT%TZ", time.gmtime()), "device": "cpu (float32)",
                  "command": " ".join(["bench/vision/emulate_fp8_error.py", *(argv or sys.argv[1:])]),
                  "dims": "demo" if args.tiny else "released", "patches": side * side, "init": "transformers",
                  "by_fp8_linears": {}}
        for linears in SETS:
            got = emulate(VisionTower.from_state_dict(cfg, state, "cpu", torch.float32), linears)(patches, grids)
            result["by_fp8_linears"]["+".join(linears)] = compare_outputs(got, want)
            print("+".join(linears), json.dumps(result["by_fp8_linears"]["+".join(linears)]["merged"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()

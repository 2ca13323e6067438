"""How much each FP8 block linear moves the vision tower's outputs, in exact float32 arithmetic on the CPU.

Every chosen block linear (qkv, proj, fc1, fc2) becomes what the GPU's FP8 linear computes, emulated: its input
rows and its weight rows rounded to e4m3 with one scale each (`quantize_rows_reference`), multiplied back out, then
an fp32 product. The tower runs at the released dims with transformers' init (N(0, 0.02) linears, LayerNorms at 1,
zero biases) on one 448x448 image and is compared with the same tower in plain fp32: the error FP8 brings with no
GPU kernel involved (the H200's FP8 tower on the 60 s video: 9.0% merged, `bench/vision/NOTES.md`).

    PYTHONPATH=.:protos python bench/vision/emulate_fp8_error.py --out bench/results/vision-fp8-emulated-error.json
    ... --scales block   # DeepSeek-style finer scales: do they help? (released dims: no, 8.7% against 8.8%)
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


BLOCK = 128  # --scales block: one scale per 1 x 128 piece of an input row and per 128 x 128 tile of the weight


def round_trip(x: torch.Tensor, rows: int = 1, cols: int = 0) -> torch.Tensor:
    """x [M, K] rounded to e4m3 and scaled back in float32, one scale per `rows` x `cols` tile (cols 0: whole rows);
    edge tiles are zero-padded (zeros leave a tile's amax alone)."""
    if not cols:
        return dequantize_rows(quantize_rows_reference(x))
    m, k = x.shape
    padded = nn.functional.pad(x, (0, -k % cols, 0, -m % rows))
    tiles = padded.view(padded.shape[0] // rows, rows, -1, cols).transpose(1, 2)  # (M/r, K/c, r, c)
    back = dequantize_rows(quantize_rows_reference(tiles.reshape(-1, rows * cols))).view_as(tiles)
    return back.transpose(1, 2).reshape(padded.shape)[:m, :k]


class EmulatedFp8Linear(nn.Module):
    """y = q(x)·q(W)ᵀ + b in float32, q() rounding to e4m3 with a scale per input row and per weight row (output
    channel), as Fp8Linear's operands; with `block`, per 1 x 128 piece of a row and per 128 x 128 weight tile."""

    def __init__(self, linear: nn.Linear, block: bool) -> None:
        super().__init__()
        self.cols = BLOCK if block else 0
        self.weight = round_trip(linear.weight.detach(), BLOCK if block else 1, self.cols)
        self.bias = linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return round_trip(x, 1, self.cols) @ self.weight.T + self.bias


def emulate(tower: VisionTower, linears: tuple[str, ...], block: bool) -> VisionTower:
    for block in tower.blocks:
        for name, owner, attr in (("qkv", block.attn, "qkv"), ("proj", block.attn, "proj"),
                                  ("fc1", block.mlp, "linear_fc1"), ("fc2", block.mlp, "linear_fc2")):
            if name in linears:
                setattr(owner, attr, EmulatedFp8Linear(getattr(owner, attr), block))
    return tower


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tiny", action="store_true", help="demo-sized tower (a smoke test)")
    p.add_argument("--scales", choices=("row", "block"), default="row",
                   help="row: Fp8Linear's scales; block: 1 x 128 activation pieces, 128 x 128 weight tiles")
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
                  "scales": args.scales,
                  "by_fp8_linears": {}}
        for linears in SETS:
            tower = VisionTower.from_state_dict(cfg, state, "cpu", torch.float32)
            got = emulate(tower, linears, args.scales == "block")(patches, grids)
            result["by_fp8_linears"]["+".join(linears)] = compare_outputs(got, want)
            print("+".join(linears), json.dumps(result["by_fp8_linears"]["+".join(linears)]["merged"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()

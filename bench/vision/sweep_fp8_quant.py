"""Launch shapes of the FP8 row quantization on the vision tower's rows, then the 60 s video through the FP8 tower
with the fastest shape for fc2's GELU rows; writes JSON.

The quantization before fc2 (GELU of fc1's 4,304-wide output, then e4m3) ran at 1.6 TB/s on the H200 where the
plain 1,152-wide pass reaches 3.3: a row per program over 8 warps reduces its amax across warps. This times the
elements each thread holds (so the warps a row takes) for both widths, with and without the GELU, and each form of
the GELU (GELU_FORMS: through exp, through PTX tanh.approx in float32, or in packed bf16 pairs).

Run on the GPU machine:  PYTHONPATH=. python bench/vision/sweep_fp8_quant.py --out sweep.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from triton.testing import do_bench

import runtime.kernels.fp8_quant_triton as quant
from bench.vision.bench_vision_tower import REAL, reference_tower, workloads
from services.vision.model.tower import VisionTower

ROWS = 47_040  # the 60 s video's patches
ELEMENTS_PER_THREAD = (8, 16, 32, 64)


def time_quantize(width: int, gelu: str) -> dict[int, dict[str, float]]:
    """gelu: "" (none) or one of GELU_FORMS."""
    x = torch.randn(ROWS, width, device="cuda", dtype=torch.bfloat16)
    moved = ROWS * width * 3  # bf16 in, e4m3 out
    out = {}
    for per_thread in ELEMENTS_PER_THREAD:
        quant.ELEMENTS_PER_THREAD = per_thread
        ms = float(do_bench(lambda: quant.quantize_rows_triton(x, bool(gelu), gelu_form=gelu or None), warmup=10,
                            rep=50, return_mode="median"))
        out[per_thread] = {"median_ms": ms, "gb_per_s": moved / (ms * 1e-3) / 1e9}
        print(f"width {width} gelu {gelu or '-'} elements/thread {per_thread}: {ms * 1e3:.1f} us", flush=True)
    return out


def time_video(per_thread: int, gelu_form: str) -> dict[str, float]:
    quant.ELEMENTS_PER_THREAD, quant.GELU_FORM = per_thread, gelu_form
    device, dtype = torch.device("cuda"), torch.bfloat16
    hf = reference_tower(REAL, device, dtype)  # transformers' init, as bench_vision_tower uses
    state = hf.state_dict()
    del hf
    video = workloads(False)[-1]
    patches = torch.randn(sum(g.num_patches for g in video.grids), REAL.patch_dim,
                          generator=torch.Generator().manual_seed(0)).to(device, dtype)
    out = {}
    for linear in ("fp8", "native"):
        tower = VisionTower.from_state_dict(REAL, state, device, dtype, linear_dtype=linear)
        with torch.inference_mode():
            ms = float(do_bench(lambda: tower(patches, video.grids), warmup=3, rep=400, return_mode="median"))
        out[f"{linear}_ms"] = ms
        print(f"video, {linear} linears: {ms:.2f} ms", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    default = quant.ELEMENTS_PER_THREAD, quant.GELU_FORM
    result: dict = {"device": torch.cuda.get_device_name(), "rows": ROWS, "default_elements_per_thread": default[0],
                    "default_gelu_form": default[1]}
    cases = [(4304, form) for form in quant.GELU_FORMS] + [(4304, ""), (1152, "")]
    result["quantize"] = {f"{w}{'_gelu_' + g if g else ''}": time_quantize(w, g) for w, g in cases}
    timings = {(form, per_thread): t["median_ms"] for form in quant.GELU_FORMS
               for per_thread, t in result["quantize"][f"4304_gelu_{form}"].items()}
    form, per_thread = min(timings, key=timings.get)
    result["video_with_best_gelu"] = {"gelu_form": form, "elements_per_thread": per_thread,
                                      **time_video(per_thread, form)}
    quant.ELEMENTS_PER_THREAD, quant.GELU_FORM = default
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""Launch shapes of the FP8 row quantization on the vision tower's rows, then the 60 s video through the FP8 tower
with each GELU form (time, and error against the native tower); writes JSON.

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
from typing import Any

import torch
from triton.testing import do_bench

import runtime.kernels.fp8_quant_triton as quant
from bench.vision.bench_vision_tower import REAL, compare_outputs, reference_tower, workloads
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


def time_video(per_thread: int) -> dict[str, Any]:
    """The 60 s video through the native tower and through the FP8 tower with each GELU form: ms and the outputs'
    error against the native tower's. 2 s of repetitions each (~25 forwards): with 0.4 s (~5) the medians of one
    form spread by ~4 ms from run to run."""
    quant.ELEMENTS_PER_THREAD = per_thread
    device, dtype = torch.device("cuda"), torch.bfloat16
    hf = reference_tower(REAL, device, dtype)  # transformers' init, as bench_vision_tower uses
    state = hf.state_dict()
    del hf
    video = workloads(False)[-1]
    patches = torch.randn(sum(g.num_patches for g in video.grids), REAL.patch_dim,
                          generator=torch.Generator().manual_seed(0)).to(device, dtype)
    native = VisionTower.from_state_dict(REAL, state, device, dtype)
    fp8 = VisionTower.from_state_dict(REAL, state, device, dtype, linear_dtype="fp8")
    with torch.inference_mode():
        out: dict[str, Any] = {"native_ms": float(do_bench(lambda: native(patches, video.grids), warmup=3, rep=2000,
                                                            return_mode="median"))}
        want = native(patches, video.grids)
        for form in quant.GELU_FORMS:
            quant.GELU_FORM = form
            ms = float(do_bench(lambda: fp8(patches, video.grids), warmup=3, rep=2000, return_mode="median"))
            out[form] = {"fp8_ms": ms, "accuracy_vs_native": compare_outputs(fp8(patches, video.grids), want)}
            print(f"video, fp8 linears, GELU {form}: {ms:.2f} ms, merged error "
                  f"{out[form]['accuracy_vs_native']['merged']['rel_err']:.4f}", flush=True)
    print(f"video, native linears: {out['native_ms']:.2f} ms", flush=True)
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
    result["fastest_gelu"] = {"gelu_form": form, "elements_per_thread": per_thread}
    result["video"] = time_video(per_thread)
    quant.ELEMENTS_PER_THREAD, quant.GELU_FORM = default
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

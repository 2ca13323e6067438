"""Vision tower benchmark: our tower vs transformers' on the same random weights and inputs; writes a JSON result.

    python bench/vision/bench_vision_tower.py --out bench/results/vision_tower_h200.json        # real dims, GPU
    python bench/vision/bench_vision_tower.py --tiny --out /tmp/vision_tiny.json                # CPU smoke test
    python bench/vision/bench_vision_tower.py --linear fp8 --out bench/results/vision_tower_fp8_h200.json

Workloads (real dims): 8 images at 448×448, 8 images at 1280×720 (smart_resize → 1280×704), a 60 s video at
2 fps and 448×448 (120 frames, 47,040 patches). Each is timed through the whole tower once per attention backend
(`--attention`, default every backend the device takes; "ours" is the first) and through the attention call
alone. With `--linear fp8` "ours" runs its block linears in FP8, as the service does: the add + LayerNorm before
qkv and fc1 writes e4m3 rows for them in its one pass; each workload is then also timed through the same tower with
native linears, and the FP8 outputs are compared with the native ones (relative error, cosine). On the video's
shapes: each block linear native vs FP8 (quantization, GEMM with fast and precise accumulation, both) and the
block's linears with the two add + LayerNorm passes that feed qkv and fc1 (native, FP8 quantizing apart, FP8 with
the quantization fused into the norm), the q/k rotary (fused kernel vs PyTorch), fc1 + GELU (GEMM epilogue vs
separate), residual add + LayerNorm (one Triton pass, with and without e4m3 output, vs PyTorch's add then norm, with a
sweep of the kernel's launch shapes on CUDA), the patch embed as one GEMM vs the Conv3d it replaces, and the uint8 →
patches preprocessing. Medians over `--iters` timed runs after `--warmup`.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from runtime.config import VISION_LINEAR_DTYPES
from runtime.kernels._backend import use_triton
from runtime.kernels.fp8_quant import quantize_rows
from runtime.kernels.layernorm import add_layernorm, add_layernorm_fp8, add_layernorm_reference
from runtime.kernels.vision_rotary import vision_rotary, vision_rotary_reference
from services.vision.model import Grid, VisionOutput, VisionTower, VisionTowerConfig
from services.vision.model.attention import ATTENTION_BACKENDS, select_attention
from services.vision.model.fp8_linear import Fp8Linear, check_linear_dtype
from services.vision.model.layers import reads_fp8_rows
from services.vision.model.plan import build_plan
from services.vision.preprocess import VisionPreprocessor
from runtime.vision_processing import VisionProcessingConfig

REAL = VisionTowerConfig(out_hidden_size=2048)  # the released checkpoint's vision_config
TINY = VisionTowerConfig(
    depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
    num_position_embeddings=64, deepstack_visual_indexes=(0, 1),
)


@dataclass(frozen=True)
class Workload:
    name: str
    grids: tuple[Grid, ...]
    items: int  # images or videos in one forward


def workloads(tiny: bool) -> list[Workload]:
    if tiny:
        return [
            Workload("images_64x64_x8", (Grid(1, 4, 4),) * 8, 8),
            Workload("images_64x128_x8", (Grid(1, 4, 8),) * 8, 8),
            Workload("video_4s_2fps_64x64", (Grid(4, 4, 4),), 1),
        ]
    return [
        Workload("images_448x448_x8", (Grid(1, 28, 28),) * 8, 8),
        Workload("images_1280x720_x8", (Grid(1, 44, 80),) * 8, 8),  # smart_resize(720, 1280) = 704 × 1280
        Workload("video_60s_2fps_448x448", (Grid(60, 28, 28),), 1),
    ]


def grid_counts(grids: tuple[Grid, ...]) -> dict[str, int]:
    """{"[t, h, w]": how many}: a compact record of a workload's grids."""
    return dict(Counter(str(list(g)) for g in grids))


def timed(fn: Callable[[], Any], device: torch.device, warmup: int, iters: int) -> dict[str, float]:
    """Median / min / max milliseconds of `fn`, synchronising around each run."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        samples.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": statistics.median(samples), "min_ms": min(samples), "max_ms": max(samples)}


def timed_or_error(fn: Callable[[], Any], device: torch.device, warmup: int, iters: int) -> dict[str, Any]:
    """`timed`, or the error of a backend that cannot run these shapes (a forced SDPA kernel refusing them)."""
    try:
        return timed(fn, device, warmup, iters)
    except RuntimeError as err:
        return {"error": str(err).splitlines()[0][:300]}


def attention_choices(spec: str, device: torch.device, dtype: torch.dtype) -> list[str]:
    """Backends named in `spec` (comma-separated), or with "all" every backend that loads on this device."""
    if spec != "all":
        names = spec.split(",")
        for name in names:
            select_attention(name, device, dtype)  # fail early on a name or device it cannot take
        return names
    usable = []
    for name in ATTENTION_BACKENDS:
        try:
            select_attention(name, device, dtype)
        except (ValueError, RuntimeError):
            continue
        usable.append(name)
    return usable


def reference_tower(cfg: VisionTowerConfig, device: torch.device, dtype: torch.dtype) -> Any | None:
    """transformers' encoder with random init at `cfg`'s dims, or None when transformers is not installed."""
    try:
        from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeVisionEncoderConfig
        from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeVisionEncoder
    except ImportError:
        return None
    hf_cfg = Qwen3OmniMoeVisionEncoderConfig(
        depth=cfg.depth, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_heads=cfg.num_heads, out_hidden_size=cfg.out_hidden_size,
        num_position_embeddings=cfg.num_position_embeddings,
        deepstack_visual_indexes=list(cfg.deepstack_visual_indexes),
    )
    hf_cfg._attn_implementation = "sdpa"
    with torch.device(device):
        model = Qwen3OmniMoeVisionEncoder(hf_cfg)
    return model.to(dtype).eval()


def random_state(cfg: VisionTowerConfig, seed: int) -> dict[str, torch.Tensor]:
    """Checkpoint-shaped random tensors (used when transformers is absent)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        shapes = {name: t.shape for name, t in VisionTower(cfg).state_dict().items()}
    shapes["patch_embed.proj.weight"] = torch.Size((cfg.hidden_size, cfg.in_channels, cfg.temporal_patch_size,
                                                    cfg.patch_size, cfg.patch_size))
    return {name: torch.randn(shape, generator=gen) * 0.02 for name, shape in shapes.items()}


def compare_outputs(got: VisionOutput, want: VisionOutput) -> dict[str, Any]:
    """Relative error ||got - want|| / ||want|| and cosine similarity of the merged output and of each deepstack one."""

    def compare(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
        a, b = a.double().flatten(), b.double().flatten()
        return {"rel_err": float((a - b).norm() / b.norm()), "cosine": float(F.cosine_similarity(a, b, dim=0))}

    return {"merged": compare(got.merged, want.merged),
            "deepstack": [compare(a, b) for a, b in zip(got.deepstack, want.deepstack)]}


def bench_tower(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    cfg = TINY if args.tiny else REAL
    check_linear_dtype(args.linear, device, dtype)  # before building anything
    hf = None if args.skip_hf else reference_tower(cfg, device, dtype)
    state = hf.state_dict() if hf is not None else random_state(cfg, seed=0)
    choices = attention_choices(args.attention, device, dtype)
    ours = VisionTower.from_state_dict(cfg, state, device, dtype, attention=choices[0], linear_dtype=args.linear)
    # the same weights with native linears: what FP8 is timed and measured against
    native = ours if args.linear == "native" else VisionTower.from_state_dict(cfg, state, device, dtype, choices[0])
    results: dict[str, Any] = {"attention_backend": ours.attention_backend, "attention_choices": choices,
                               "linear_dtype": ours.linear_dtype, "norms_writing_fp8": norms_writing_fp8(ours),
                               "workloads": {}, "attention_only": {}}
    gen = torch.Generator().manual_seed(0)
    for work in workloads(args.tiny):
        num_patches = sum(g.num_patches for g in work.grids)
        patches = torch.randn(num_patches, cfg.patch_dim, generator=gen).to(device, dtype)
        row: dict[str, Any] = {"patches": num_patches, "items": work.items, "grids": grid_counts(work.grids)}
        # host-only cost of a batch shape seen for the first time (later ones hit the tower's plan cache)
        row["plan_build"] = timed(lambda: build_plan(work.grids, cfg.spatial_merge_size, cfg.position_grid_side),
                                  torch.device("cpu"), args.warmup, args.iters)
        row["by_attention"] = {}
        for name in choices:
            ours.use_attention(name)
            run = timed if name == choices[0] else timed_or_error  # "ours" must run; a forced kernel may refuse
            row["by_attention"][name] = run(lambda: ours(patches, work.grids), device, args.warmup, args.iters)
        row["ours"] = dict(row["by_attention"][choices[0]])
        row["ours"]["items_per_s"] = work.items / (row["ours"]["median_ms"] / 1e3)
        if native is not ours:
            row["native_linears"] = timed(lambda: native(patches, work.grids), device, args.warmup, args.iters)
            row["native_over_ours"] = row["native_linears"]["median_ms"] / row["ours"]["median_ms"]
            row["accuracy_vs_native"] = compare_outputs(ours(patches, work.grids), native(patches, work.grids))
        if hf is not None:
            grid_thw = torch.tensor([list(g) for g in work.grids], device=device)
            with torch.inference_mode():
                row["transformers"] = timed(lambda: hf(patches, grid_thw=grid_thw), device, args.warmup, args.iters)
            row["transformers_over_ours"] = row["transformers"]["median_ms"] / row["ours"]["median_ms"]
        results["workloads"][work.name] = row
        results["attention_only"][work.name] = bench_attention(cfg, ours, work, choices, device, dtype, args)
        print(f"{work.name}: {json.dumps(row)}", flush=True)
    ours.use_attention(choices[0])
    video = workloads(args.tiny)[-1]
    try:
        check_linear_dtype("fp8", device, dtype)
    except ValueError as err:  # no FP8 GEMM here: say why instead of timing it
        results["block_linears"] = {"skipped": str(err)}
    else:
        results["block_linears"] = bench_block_linears(cfg, native, video, device, dtype, args)
    results["rotary"] = bench_rotary(cfg, ours, video, device, dtype, args)
    results["mlp_fc1"] = bench_fc1_gelu(cfg, native, video, device, dtype, args)
    results["add_layernorm"] = bench_add_layernorm(cfg, ours, video, device, dtype, args)
    results["patch_embed"] = bench_patch_embed(cfg, ours, video, device, dtype, args)
    results["preprocess"] = bench_preprocess(video, device, args)
    return results


def norms_writing_fp8(tower: VisionTower) -> int:
    """How many add + LayerNorm passes per forward write e4m3 rows for the FP8 linear after them (2 per block with
    FP8 linears: before qkv and before fc1; 0 with native ones)."""
    return sum(reads_fp8_rows(block.attn.qkv) + reads_fp8_rows(block.mlp.linear_fc1) for block in tower.blocks)


def bench_attention(
    cfg: VisionTowerConfig, ours: VisionTower, work: Workload, choices: list[str], device: torch.device,
    dtype: torch.dtype, args: argparse.Namespace,
) -> dict[str, Any]:
    """One block's attention call per backend, on q, k and a v that is a strided view of qkv, as in the tower."""
    plan = ours.plan(work.grids)
    qkv = torch.randn(plan.num_patches, 3, cfg.num_heads, cfg.head_dim, device=device, dtype=dtype)
    q, k, v = qkv[:, 0].contiguous(), qkv[:, 1].contiguous(), qkv[:, 2]
    row = {}
    with torch.inference_mode():
        for name in choices:
            attend = select_attention(name, device, dtype)[1]
            row[name] = timed_or_error(lambda: attend(q, k, v, plan), device, args.warmup, args.iters)
    return row


# calls queued back to back per timed sample of a block linear or its parts (the quantization pass is ~0.1 ms)
LINEAR_CALLS = 10


def bench_block_linears(
    cfg: VisionTowerConfig, native: VisionTower, work: Workload, device: torch.device, dtype: torch.dtype,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Block 0's qkv, proj, fc1 and fc2 on the video's rows: as the native tower runs them (fc1 with GELU in its
    GEMM's epilogue on CUDA) vs as FP8 linears, whole and in parts (the per-row quantization, the FP8 GEMM with fast
    and with precise accumulation). The FP8 tower moves fc1's GELU into fc2's quantization, and qkv's and fc1's
    quantization into the add + LayerNorm before each (`norms`: that pass writing its rows in the tower's dtype vs in
    e4m3; `fp8_prequantized`: the layer on rows it gets already quantized), so compare the per-block sums, which count
    the two norms too.
    tflop_s counts 2·rows·in·out per GEMM, the quantization's gb_per_s the bytes it moves; rel_err and cosine compare
    each FP8 layer's output with the native layer's (fc1 before its GELU)."""
    rows = sum(g.num_patches for g in work.grids)
    block = native.blocks[0]
    layers = {"qkv": block.attn.qkv, "proj": block.attn.proj, "fc1": block.mlp.linear_fc1,
              "fc2": block.mlp.linear_fc2}
    prequantized = ("qkv", "fc1")  # the layers whose norm quantizes for them
    epilogue = device.type == "cuda" and dtype in (torch.bfloat16, torch.float16)  # as VisionMLP decides
    result: dict[str, Any] = {"patches": rows, "layers": {}}
    gen = torch.Generator().manual_seed(1)

    def per_call(fn: Callable[[], Any]) -> dict[str, float]:
        return timed_per_call(fn, device, args.warmup, args.iters, LINEAR_CALLS)

    with torch.inference_mode():
        y, residual = (torch.randn(rows, cfg.hidden_size, generator=gen).to(device, dtype) for _ in range(2))
        norm = block.norm2
        inputs = (y, residual, norm.weight, norm.bias, norm.eps)
        result["norms"] = {"native": per_call(partial(add_layernorm, *inputs)),  # writes the rows in `dtype`
                           "fp8": per_call(partial(add_layernorm_fp8, *inputs))}  # writes them in e4m3
        for name, layer in layers.items():
            x = torch.randn(rows, layer.in_features, generator=gen).to(device, dtype)
            fp8 = Fp8Linear.from_linear(layer)
            gelu = name == "fc2"  # fc2's FP8 input quantization applies the GELU the native fc1 ran
            quantized = quantize_rows(x, gelu)
            if name == "fc1" and epilogue:
                native_call = partial(torch._addmm_activation, layer.bias, x, layer.weight.t(), use_gelu=True)
            else:
                native_call = partial(layer, x)
            gemm = partial(torch._scaled_mm, quantized.values, fp8.weight.t(), scale_a=quantized.scale,
                           scale_b=fp8.weight_scale, bias=fp8.bias, out_dtype=dtype)
            flop = 2 * rows * layer.in_features * layer.out_features
            entry = {
                "in": layer.in_features, "out": layer.out_features,
                "native": per_call(native_call),
                "quantize": per_call(partial(quantize_rows, x, gelu)),
                "fp8_gemm_fast_accum": per_call(partial(gemm, use_fast_accum=True)),
                "fp8_gemm_precise_accum": per_call(partial(gemm, use_fast_accum=False)),
                "fp8": per_call(partial(fp8, x, gelu)),
            }
            if name in prequantized:
                entry["fp8_prequantized"] = per_call(partial(fp8, quantized))
            for part in ("native", "fp8_gemm_fast_accum", "fp8_gemm_precise_accum"):
                entry[part]["tflop_s"] = flop / (entry[part]["median_ms"] * 1e9)
            # the pass reads x and writes one e4m3 byte per element and one float32 scale per row
            moved = x.numel() * (x.element_size() + 1) + 4 * rows
            entry["quantize"]["gb_per_s"] = moved / (entry["quantize"]["median_ms"] * 1e6)
            want = layer(F.gelu(x, approximate="tanh") if gelu else x).double().flatten()
            got = fp8(x, gelu).double().flatten()
            entry["rel_err"] = float((got - want).norm() / want.norm())
            entry["cosine"] = float(F.cosine_similarity(got, want, dim=0))
            entry["native_over_fp8"] = entry["native"]["median_ms"] / entry["fp8"]["median_ms"]
            result["layers"][name] = entry
    result["per_block"] = block_totals(result, prequantized, cfg.depth)
    return result


def block_totals(result: dict[str, Any], prequantized: tuple[str, ...], depth: int) -> dict[str, Any]:
    """One block's four linears and the two add + LayerNorm passes before qkv and fc1, in milliseconds: native;
    FP8 with each linear quantizing its own input (norms in bf16); FP8 as the tower runs it (qkv's and fc1's
    quantization inside their norms)."""
    median = {name: {part: t["median_ms"] for part, t in entry.items() if isinstance(t, dict)}
              for name, entry in result["layers"].items()}
    norms = {out: t["median_ms"] for out, t in result["norms"].items()}
    native = sum(m["native"] for m in median.values()) + 2 * norms["native"]
    separate = sum(m["fp8"] for m in median.values()) + 2 * norms["native"]
    fused = sum(m["fp8_prequantized"] if name in prequantized else m["fp8"] for name, m in median.items())
    fused += 2 * norms["fp8"]
    return {"native_ms": native, "fp8_separate_quantize_ms": separate, "fp8_ms": fused,
            "native_over_fp8": native / fused, "saving_per_forward_ms": (native - fused) * depth,
            "fused_quantize_saving_per_forward_ms": (separate - fused) * depth}


def bench_rotary(
    cfg: VisionTowerConfig, ours: VisionTower, work: Workload, device: torch.device, dtype: torch.dtype,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One block's q/k rotary: the entry point (one Triton launch on CUDA) vs the PyTorch reference."""
    plan = ours.plan(work.grids)
    cos, sin = ours.rotary(plan)
    qkv = torch.randn(plan.num_patches, 3, cfg.num_heads, cfg.head_dim, device=device, dtype=dtype)
    q, k = qkv[:, 0], qkv[:, 1]
    fused = timed(lambda: vision_rotary(q, k, cos, sin), device, args.warmup, args.iters)
    reference = timed(lambda: vision_rotary_reference(q, k, cos, sin), device, args.warmup, args.iters)
    return {"patches": plan.num_patches, "fused": fused, "reference": reference,
            "reference_over_fused": reference["median_ms"] / fused["median_ms"]}


def bench_fc1_gelu(
    cfg: VisionTowerConfig, native: VisionTower, work: Workload, device: torch.device, dtype: torch.dtype,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """fc1 + GELU(tanh): GEMM then a GELU pass vs GELU in the GEMM's epilogue (what the native tower runs on CUDA)."""
    num_patches = sum(g.num_patches for g in work.grids)
    x = torch.randn(num_patches, cfg.hidden_size, device=device, dtype=dtype)
    fc1 = native.blocks[0].mlp.linear_fc1
    with torch.inference_mode():
        separate = timed(lambda: F.gelu(fc1(x), approximate="tanh"), device, args.warmup, args.iters)
        epilogue = timed(lambda: torch._addmm_activation(fc1.bias, x, fc1.weight.t(), use_gelu=True),
                         device, args.warmup, args.iters)
    return {"patches": num_patches, "separate": separate, "epilogue": epilogue,
            "separate_over_epilogue": separate["median_ms"] / epilogue["median_ms"]}


# (rows per program, warps) tried for the add + LayerNorm kernel besides its default
ADD_LAYERNORM_LAUNCHES = ((1, 4), (1, 8), (2, 8), (4, 16))
# calls queued back to back per timed sample: a ~0.1 ms kernel timed alone would also count its host launch cost,
# which the tower hides behind the GPU's queue
ADD_LAYERNORM_CALLS = 10


def timed_per_call(fn: Callable[[], Any], device: torch.device, warmup: int, iters: int,
                   calls: int) -> dict[str, float]:
    """`timed` over `calls` back-to-back runs of `fn`, divided per call."""
    timing = timed(lambda: [fn() for _ in range(calls)], device, warmup, iters)
    return {name: ms / calls for name, ms in timing.items()}


def bench_add_layernorm(
    cfg: VisionTowerConfig, ours: VisionTower, work: Workload, device: torch.device, dtype: torch.dtype,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One residual add + the LayerNorm that reads the sum: the entry point (one Triton pass on CUDA in bf16/fp16)
    vs PyTorch's add then norm, and the pass writing e4m3 rows for an FP8 linear (`fused_fp8`). The fused pass moves
    four [N, hidden] tensors (reads y and residual, writes h and norm(h)), the separate ops five (the norm re-reads
    h), the e4m3 pass three and one byte per element (its per-row scales are ~0.2% more); gb_per_s counts those
    bytes."""
    num_patches = sum(g.num_patches for g in work.grids)
    y = torch.randn(num_patches, cfg.hidden_size, device=device, dtype=dtype)
    residual = torch.randn(num_patches, cfg.hidden_size, device=device, dtype=dtype)
    norm = ours.blocks[0].norm2
    inputs = (y, residual, norm.weight, norm.bias, norm.eps)
    tensor_bytes = y.numel() * y.element_size()
    fp8_tensors = 3 + 1 / y.element_size()

    def measure(fn: Callable[[], Any], tensors_moved: float) -> dict[str, float]:
        timing = timed_per_call(fn, device, args.warmup, args.iters, ADD_LAYERNORM_CALLS)
        return {**timing, "gb_per_s": tensors_moved * tensor_bytes / (timing["median_ms"] * 1e6)}

    with torch.inference_mode():
        fused = measure(lambda: add_layernorm(*inputs), 4)
        fused_fp8 = measure(lambda: add_layernorm_fp8(*inputs), fp8_tensors)
        separate = measure(lambda: add_layernorm_reference(*inputs), 5)
        launches, launches_fp8 = {}, {}
        if use_triton(y, residual, norm.weight, norm.bias):
            from runtime.kernels.layernorm_triton import add_layernorm_fp8_triton, add_layernorm_triton

            for block_rows, num_warps in ADD_LAYERNORM_LAUNCHES:
                shape = {"block_rows": block_rows, "num_warps": num_warps}
                name = f"{block_rows}rows_{num_warps}warps"
                launches[name] = measure(lambda: add_layernorm_triton(*inputs, **shape), 4)
                launches_fp8[name] = measure(lambda: add_layernorm_fp8_triton(*inputs, **shape), fp8_tensors)
    calls = 2 * cfg.depth + 1  # embeddings + positions into the first norm1, then two per block
    saving = separate["median_ms"] - fused["median_ms"]
    return {"patches": num_patches, "fused": fused, "fused_fp8": fused_fp8, "separate": separate,
            "by_launch": launches, "by_launch_fp8": launches_fp8,
            "separate_over_fused": separate["median_ms"] / fused["median_ms"],
            "fused_per_forward": calls, "saving_per_forward_ms": saving * calls}


def bench_patch_embed(
    cfg: VisionTowerConfig, ours: VisionTower, work: Workload, device: torch.device, dtype: torch.dtype,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One GEMM over flattened patches vs the Conv3d (kernel == stride) it replaces, on the video's patches."""
    num_patches = sum(g.num_patches for g in work.grids)
    patches = torch.randn(num_patches, cfg.patch_dim, device=device, dtype=dtype)
    weight, bias = ours.patch_embed.proj.weight, ours.patch_embed.proj.bias
    kernel = weight.view(cfg.hidden_size, cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
    stride = (cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
    volumes = patches.view(-1, cfg.in_channels, *stride)

    with torch.inference_mode():
        gemm = timed(lambda: F.linear(patches, weight, bias), device, args.warmup, args.iters)
        conv = timed(lambda: F.conv3d(volumes, kernel, bias, stride=stride), device, args.warmup, args.iters)
    ratio = conv["median_ms"] / gemm["median_ms"]
    return {"patches": num_patches, "gemm": gemm, "conv3d": conv, "conv3d_over_gemm": ratio}


def bench_preprocess(work: Workload, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """uint8 frames on the host -> normalised patch rows on the device, for the video workload."""
    grid = work.grids[0]
    frames = torch.randint(0, 256, (2 * grid.t, 16 * grid.h, 16 * grid.w, 3), dtype=torch.uint8)
    pre = VisionPreprocessor(VisionProcessingConfig(), device)
    return {"frames": list(frames.shape), **timed(lambda: pre.video(frames), device, args.warmup, args.iters)}


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def library_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001 - absent or broken metadata only omits a field
        return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where the JSON result is written")
    parser.add_argument("--tiny", action="store_true", help="tiny dims and inputs: a CPU smoke test")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default=None,
                        help="default: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--attention", default="all",
                        help=f"comma-separated backends to time, the first being 'ours', or 'all' (default: every "
                             f"backend this device takes) from {', '.join(ATTENTION_BACKENDS)}")
    parser.add_argument("--linear", choices=VISION_LINEAR_DTYPES, default="native",
                        help="the tower's block linears (qkv, proj, fc1, fc2): native (the tower's dtype, default) or "
                             "fp8 (e4m3, CUDA with compute capability >= 8.9 and bfloat16; also times the native tower "
                             "and records the FP8 outputs' error against it)")
    parser.add_argument("--warmup", type=int, default=None, help="default: 3 (1 with --tiny)")
    parser.add_argument("--iters", type=int, default=None, help="default: 10 (2 with --tiny)")
    parser.add_argument("--skip-hf", action="store_true", help="do not time transformers' vision tower")
    args = parser.parse_args(argv)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 3)
    args.iters = args.iters if args.iters is not None else (2 if args.tiny else 10)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    torch.manual_seed(0)
    result = {
        "benchmark": "vision_tower",
        "commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "config": asdict(TINY if args.tiny else REAL),
        "dtype": str(dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "transformers": library_version("transformers"),
        "warmup": args.warmup,
        "iters": args.iters,
        **bench_tower(args, device, dtype),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()

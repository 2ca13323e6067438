"""Where a family's step time goes (bench/thinker/lm_families.py, released dims): the kernels of one eager prefill
step of fresh requests and of the one-row and largest decode graph replays, by device time, plus the host ops of
the prefill step by self time. The prefill step's wall time beside its kernels' summed time says whether the host
or the device bounds it.

    python bench/thinker/profile_lm.py --family qwen3.5-9b --out /tmp/profile-q35-9b.json
    python bench/thinker/profile_lm.py --family qwen3.5-9b --prefill-rows 16 --prompt-tokens 300 --out /tmp/p.json
    python bench/thinker/profile_lm.py --family qwen3.5-9b --prompt-tokens 8192 --rows 2 --media --out /tmp/p.json
    python bench/thinker/profile_lm.py --family qwen3-asr-1.7b --prompt-tokens 65 --media --mixed-rows 12 48 --out ...

`--media` makes each prompt's rows 1..n-2 one media item of random host embeddings (no deepstack), which the step
writes into its embeddings as a live video's step does: the isolated step against the live one, media path included.
`--mixed-rows R..` times, on the served graphs (prefill ladder included), a step of R decode rows alone and one with a
fresh prompt beside them, as a closed loop of short requests runs them (each arrival's prefill joins a decode step):
wall time (sync to sync) and device time by kernel of each.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from bench.thinker import engine_loop  # noqa: E402
from bench.thinker.bench_lm import served_model, transformers_model  # noqa: E402
from bench.thinker.bench_thinker import provenance_of  # noqa: E402
from bench.thinker.lm_families import FAMILIES  # noqa: E402
from bench.thinker.step_profile import kernel_breakdown  # noqa: E402
from bench.thinker.workload import PromptMaker  # noqa: E402
from runtime.config import EngineConfig  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402
from services.thinker.model import ThinkerConfig  # noqa: E402
from services.thinker.request import MediaInput, ThinkerRequest  # noqa: E402


def summed_events(prof: Any, device: bool) -> tuple[dict[str, float], dict[str, int]]:
    """Events summed by name: CUDA kernels by device time, or host ops by self CPU time (us), and their counts."""
    total: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for ev in prof.events():
        on_device = ev.device_type == torch.autograd.DeviceType.CUDA
        if on_device != device:
            continue
        total[ev.name] += ev.time_range.elapsed_us() if device else ev.self_cpu_time_total
        calls[ev.name] += 1
    return total, calls


def top_events(prof: Any, device: bool, top: int = 16) -> list[dict[str, Any]]:
    total, calls = summed_events(prof, device)
    return [{"name": name[:100], "us": round(us, 1), "calls": calls[name]}
            for name, us in sorted(total.items(), key=lambda kv: -kv[1])[:top]]


def timed_step(engine: Any, profiled: bool) -> dict[str, Any]:
    """One engine step, sync to sync: its wall ms, and with `profiled` its kernels by device time."""
    torch.cuda.synchronize()
    if not profiled:
        t0 = time.perf_counter()
        engine.step()
        torch.cuda.synchronize()
        return {"wall_ms": (time.perf_counter() - t0) * 1e3}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        engine.step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    kernels, launches = summed_events(prof, device=True)
    return {"wall_ms": wall * 1e3, "device_ms": sum(kernels.values()) / 1e3, "launches": sum(launches.values()),
            "kernels": top_events(prof, device=True, top=10), "host_ops": top_events(prof, device=False, top=10)}


def mixed_step(engine: Any, rows: int, maker: PromptMaker, request: Any, first_id: int) -> dict[str, Any]:
    """`rows` sequences brought to decoding, then: decode steps alone, and the step that takes a fresh prompt beside
    them (its prefill runs with their decode rows). Wall times are medians of 5 (unprofiled), then one profiled."""
    options = engine_loop.workload_sampling("greedy", 256)
    for i in range(rows):
        ids = maker.make(first_id + i).token_ids
        engine.add(engine_loop.text_sequence(first_id + i, ids, options, request(ids, first_id + i)))
    for _ in range(4):  # their prefills, then decode steps on the graphs
        engine.step()
    decode = [timed_step(engine, False)["wall_ms"] for _ in range(5)]
    decode_profiled = timed_step(engine, True)
    walls = []
    one_token = engine_loop.workload_sampling("greedy", 1)  # each newcomer ends at its prefill: `rows` decode on
    for k in range(6):
        index = first_id + rows + k
        ids = maker.make(index).token_ids
        engine.add(engine_loop.text_sequence(index, ids, one_token, request(ids, index)))
        step = timed_step(engine, k == 5)
        walls.append(step["wall_ms"])
    while engine.has_work:
        engine.step()
    return {"decode_rows": rows, "decode_wall_ms": sorted(decode)[2], "decode_profiled": decode_profiled,
            "with_prefill_wall_ms": sorted(walls[:5])[2], "with_prefill_profiled": step,
            "eager_steps": getattr(engine.runner.inner, "eager_steps", None)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=sorted(FAMILIES), required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--rows", type=int, default=32, help="the larger decode graph profiled")
    p.add_argument("--prefill-rows", type=int, default=1, help="fresh prompts in the profiled prefill step")
    p.add_argument("--media", action="store_true", help="each prompt's rows 1..n-2 are one media item")
    p.add_argument("--mixed-rows", type=int, nargs="*", default=[],
                   help="decode rows beside which one fresh prompt's prefill step is timed")
    args = p.parse_args()
    device, dtype = torch.device("cuda"), torch.bfloat16
    family = FAMILIES[args.family](False)
    cfg = ThinkerConfig.from_dict(family.root)
    model = served_model(transformers_model(family, device, dtype), cfg, device)
    step_tokens = max(2048, args.prefill_rows * args.prompt_tokens)  # the prefill rows share one step
    max_rows = max(args.rows, args.prefill_rows, *(r + 1 for r in args.mixed_rows))  # + the newcomer
    eng = EngineConfig(max_num_seqs=max_rows, max_batch_tokens=step_tokens,
                       kv_cache_bytes=4 << 30, max_model_len=max(4096, args.prompt_tokens + 128),
                       decode_batch_buckets=tuple(sorted({1, args.rows, *args.mixed_rows})),
                       prefill_token_buckets=tuple(n for n in (64, 128, 256, 512, 1024, 2048) if n <= step_tokens)
                       if args.mixed_rows else ())
    engine = engine_loop.build_engine(model, eng, device, dtype)
    maker = PromptMaker(resolve_model(family.demo_model), args.prompt_tokens)
    options = engine_loop.workload_sampling("greedy", 8)

    def request(ids: list[int], seed: int) -> ThinkerRequest:
        req = engine_loop.text_request(ids, cfg)
        if args.media:  # host embeddings at a token embedding's scale, as a stage's reply leaves them
            rows = torch.randn(len(ids) - 2, cfg.hidden_size, generator=torch.Generator().manual_seed(seed)) * 0.02
            req.media.append(MediaInput("video", 1, rows.shape[0], (), 0.0, f"profile-{seed}", rows.to(dtype)))
        return req

    def first_step(index: int) -> float:
        for row in range(args.prefill_rows):
            seq_id = index * args.prefill_rows + row
            ids = maker.make(seq_id).token_ids
            engine.add(engine_loop.text_sequence(seq_id, ids, options, request(ids, seq_id)))
        t0 = time.perf_counter()
        engine.step()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        while engine.has_work:
            engine.step()
        return seconds

    warm = [first_step(i) for i in range(3)]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        seconds = first_step(3)
    mixed = [mixed_step(engine, rows, maker, request, 10_000 * (i + 1)) for i, rows in enumerate(args.mixed_rows)]
    command = (f"python bench/thinker/profile_lm.py --family {args.family} --prompt-tokens {args.prompt_tokens} "
               f"--rows {args.rows} --prefill-rows {args.prefill_rows}{' --media' * args.media}"
               + (f" --mixed-rows {' '.join(map(str, args.mixed_rows))}" if args.mixed_rows else "")
               + f" --out {args.out}")
    kernels, launches = summed_events(prof, device=True)
    out: dict[str, Any] = {
        **provenance_of(command, device), "family": family.name, "prompt_tokens": args.prompt_tokens,
        "prefill_rows": args.prefill_rows, "media": args.media,
        "prefill_step_ms": {"warm_ups": [s * 1e3 for s in warm], "profiled": seconds * 1e3,
                            "kernels_summed": sum(kernels.values()) / 1e3, "launches": sum(launches.values())},
        "prefill_kernels": top_events(prof, device=True), "prefill_host_ops": top_events(prof, device=False),
    }
    runner = engine.runner.inner
    kv_len = args.prompt_tokens + 64
    out["decode"] = [kernel_breakdown(runner, b, kv_len, top=16) for b in (1, args.rows)]
    if mixed:
        out["mixed"] = mixed
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps({"prefill_step_ms": out["prefill_step_ms"], "prefill_kernels": out["prefill_kernels"][:8],
                      "prefill_host_ops": out["prefill_host_ops"][:8],
                      "decode": [{k: d.get(k) for k in ("rows", "device_us_per_step", "kernels_per_step")} | {
                          "top": d.get("top", [])[:8]} for d in out["decode"]]}, indent=1))


if __name__ == "__main__":
    main()

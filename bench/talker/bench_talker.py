"""Talker-stage throughput at real dims with random bf16 weights: talker+code-predictor frames/s and Code2Wav audio-s/s.

    python bench/talker/bench_talker.py --out bench/results/talker_h200.json          # one H200
    python bench/talker/bench_talker.py --tiny --out /tmp/talker_tiny.json              # CPU smoke test (demo dims)

Engine-free numbers of `TalkerRunner.step` and `start_many` (the prefill): the plain PyTorch reference loop
("eager") and the service's GPU path, replayed as CUDA graphs ("graphs"). Codec EOS is suppressed so every row
runs every frame.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from bench.moe_routing import ROUTING_MODES, routing_record  # noqa: E402
from bench.talker.balance import balance_talker_routing, decode_experts_touched, recorded_routing  # noqa: E402
from runtime.checkpoint.demo_config import demo_config  # noqa: E402
from services.talker.model.code2wav import Code2Wav  # noqa: E402
from services.talker.model.code2wav_stream import StreamingCode2Wav, decode_streams  # noqa: E402
from services.talker.model.code_predictor import CodePredictor  # noqa: E402
from services.talker.model.config import TalkerConfig, parse_talker_config  # noqa: E402
from services.talker.model.frame_step import DENSE_ROWS  # noqa: E402
from services.talker.model.generate import RowStart, TalkerRunner, TalkerState  # noqa: E402
from services.talker.model.load import TalkerModel, cast_parameters  # noqa: E402
from services.talker.model.prompt import SpeechPrompt  # noqa: E402
from services.talker.model.sampling import TalkerSampling  # noqa: E402
from services.talker.model.talker_lm import TalkerLM  # noqa: E402

FRAMES_PER_SECOND = 12.5  # 24 kHz / 1920 samples per frame
IM_START, IM_END, USER, ASSISTANT, NEWLINE = 151644, 151645, 872, 77091, 198
VOICES = ("ethan", "chelsie", "aiden")


def real_config() -> dict[str, Any]:
    """The released Qwen3-Omni-30B-A3B talker/code2wav dims (docs/model-dims.md) on the demo layout."""
    cfg = demo_config()
    talker = cfg["talker_config"]
    talker.update(thinker_hidden_size=2048, accept_hidden_layer=24)
    talker["text_config"].update(
        hidden_size=1024, intermediate_size=2048, num_hidden_layers=20, num_attention_heads=16, num_key_value_heads=2,
        head_dim=128, moe_intermediate_size=384, shared_expert_intermediate_size=768, num_experts=128,
        num_experts_per_tok=6, rope_scaling={"mrope_section": [24, 20, 20], "interleaved": True},
    )  # fmt: skip
    talker["code_predictor_config"].update(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=5, num_attention_heads=16, num_key_value_heads=8,
        head_dim=128,
    )  # fmt: skip
    cfg["code2wav_config"].update(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16,
        decoder_dim=1536,
    )  # fmt: skip
    cfg["thinker_config"]["text_config"]["hidden_size"] = 2048
    return cfg


def random_model(cfg: TalkerConfig, device: str, dtype: torch.dtype) -> TalkerModel:
    with torch.device(device):
        lm, predictor, code2wav = TalkerLM(cfg.lm), CodePredictor(cfg.code_predictor), Code2Wav(cfg.code2wav)
        for module in (lm, predictor, code2wav):
            for name, p in module.named_parameters():
                nn.init.ones_(p) if name.endswith("norm.weight") else nn.init.normal_(p, std=0.02)
            cast_parameters(module, dtype).eval().requires_grad_(False)
        embed = (torch.randn(152064, cfg.lm.thinker_hidden_size) * 0.02).to(dtype)
    lm.use_grouped_mm(device.startswith("cuda"))
    return TalkerModel(cfg, lm, predictor, code2wav, embed)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# Row i's words and streamed text are drawn from its own seed over a wide id range: rows of one batch share no
# inputs, as concurrent requests do not. Shared ones (each row's words one id off its neighbour's, every row fed the
# same text token at each step) make a batch's hidden states alike, which routes it to fewer experts than a
# trained router would (the routing rule in docs/benchmarks.md).
WORD_IDS = (1000, 150000)


def row_tokens(i: int, count: int, stream: int) -> list[int]:
    """`count` word ids of row i: its prompt's (stream 0) or the text it is fed while speaking (stream 1)."""
    gen = torch.Generator().manual_seed(1_000_003 * i + stream)
    return torch.randint(*WORD_IDS, (count,), generator=gen).tolist()


def prompt(i: int, words: int) -> SpeechPrompt:
    ids = [IM_START, USER, NEWLINE, *row_tokens(i, words, 0), IM_END, NEWLINE, IM_START, ASSISTANT, NEWLINE]
    return SpeechPrompt(ids, VOICES[i % len(VOICES)])


def full_batch(model: TalkerModel, batch: int, frames: int, fast: bool, dense: bool = False
               ) -> tuple[TalkerRunner, list[TalkerState]]:  # fmt: skip
    """`batch` rows started (their prefill done) and fed text for `frames` steps; codec EOS is suppressed so every
    step runs every row. `dense`: the fast frame's code predictor steps as persistent launches, not layer by layer."""
    runner = TalkerRunner(model, batch, 32 + 9 + frames + 2, fast=fast, cuda_graphs=fast)
    if dense:
        assert runner.frames is not None
        runner.frames.step.set_dense_rows(DENSE_ROWS)
    runner.capture_graphs()
    runner.suppress[model.cfg.tokens.codec_eos] = True
    states = [runner.start(prompt(i, 20), 500 + i, TalkerSampling(seed=i), max_frames=10**6) for i in range(batch)]
    for i, s in enumerate(states):
        for token in row_tokens(i, frames + 1, 1):
            s.push_text(token)
    return runner, states


def calibrate_routing(model: TalkerModel, batch: int, frames: int, **how: Any) -> dict[str, Any]:
    """bench/talker/balance.py's passes (`how`: its options), each on `batch` prompts' prefill and `frames` eager
    decode steps."""
    def drive() -> None:
        runner, states = full_batch(model, batch, frames, fast=False)
        for _ in range(frames):
            runner.step(states)

    return balance_talker_routing(model, drive, **how)


def routing(model: TalkerModel, mode: str, batches: list[int], frames: int) -> dict[str, Any]:
    """The result's routing record: distinct experts a layer read in `frames` eager decode steps of each batch."""
    touched: dict[str, Any] = {}
    for b in batches:
        runner, states = full_batch(model, b, frames, fast=False)  # the prefill stays out of the count
        with recorded_routing(model) as calls:
            for _ in range(frames):
                runner.step(states)
        touched |= decode_experts_touched(calls, model.cfg.lm.num_experts, model.cfg.lm.num_experts_per_tok, [b])
    return routing_record(mode, touched, "eager decode steps of each measured batch, the talker's routers hooked "
                                         "(bench/talker/balance.py); the fused path reads the same router weights")


def bench_talker(
    model: TalkerModel, batch: int, warmup: int, steps: int, device: str, path: str
) -> dict[str, Any]:
    """ms per `TalkerRunner.step` (code predictor for every row + one talker forward) at a fixed batch.

    `path` "graphs": the fused frame step replayed as CUDA graphs (the service's GPU path); "graphs-dense" the same
    with the code predictor's steps as persistent launches (up to DENSE_ROWS rows); "eager" the reference loop.
    """
    runner, states = full_batch(model, batch, warmup + steps, path != "eager", path == "graphs-dense")
    for _ in range(warmup):
        runner.step(states)
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        runner.step(states)
    sync(device)
    seconds = time.perf_counter() - start
    frames_per_s = batch * steps / seconds
    return {"batch": batch, "path": path, "ms_per_step": 1e3 * seconds / steps,
            "frames_per_s": frames_per_s,
            "audio_s_per_s": frames_per_s / FRAMES_PER_SECOND}  # fmt: skip


def bench_prefill(model: TalkerModel, batch: int, words: int, reps: int, device: str, fast: bool) -> dict[str, Any]:
    """ms for `TalkerRunner.start_many` of `batch` prompts together (prefill + first code 0), median of `reps`.

    `fast`: the service's GPU path (the prefill replayed from a graph per (rows, padded length) bucket); else eager.
    """
    runner = TalkerRunner(model, batch, 64 + words, fast=fast, cuda_graphs=fast)
    runner.capture_graphs()
    starts = [RowStart(prompt(i, words), 500 + i, TalkerSampling(seed=i), max_frames=8) for i in range(batch)]
    times = []
    for rep in range(reps + 2):  # the first two pay one-time costs
        sync(device)
        t0 = time.perf_counter()
        states = runner.start_many(starts)
        sync(device)
        if rep >= 2:
            times.append(time.perf_counter() - t0)
        for s in states:
            if isinstance(s, TalkerState):
                runner.release(s)
    return {"batch": batch, "prompt_words": words, "path": "graphs" if fast else "eager",
            "ms_median": 1e3 * statistics.median(times), "ms_min": 1e3 * min(times)}  # fmt: skip


def bench_code2wav(
    model: TalkerModel, batch: int, chunk: int, context: int, chunks: int, device: str
) -> dict[str, float]:
    """Steady-state streaming decode: `batch` streams, `chunk` new frames per call, `context` frames re-vocoded.

    Eager, and on CUDA also through the CUDA graphs the talker service enables (`ms_per_chunk` is the faster).
    Graphs go first, as in the service: PyTorch caches one cuDNN plan per conv shape whatever
    `cudnn.benchmark` says, so whichever path meets a shape first decides its algorithm for both, and the
    service's warm-up captures with benchmarking on.
    """
    c2w = model.code2wav

    def stream_ms() -> tuple[float, float]:
        streams = [StreamingCode2Wav(c2w, chunk, chunk, context) for _ in range(batch)]
        total = (chunks + 4) * chunk
        codes = torch.randint(0, model.cfg.code2wav.codebook_size, (batch, 16, total), device=device)
        warm = 4 * chunk  # reaches the full context: every measured call has one shape
        for s, c in zip(streams, codes):
            s.push(c[:, :warm])
        decode_streams(c2w, streams)
        for s, c in zip(streams, codes):
            s.push(c[:, warm:])
        sync(device)
        start = time.perf_counter()
        samples = sum(p.numel() for pieces in decode_streams(c2w, streams) for p in pieces)
        sync(device)
        seconds = time.perf_counter() - start
        return 1e3 * seconds / chunks, samples / (FRAMES_PER_SECOND * c2w.samples_per_frame) / seconds

    row: dict[str, float] = {"batch": batch, "chunk_frames": chunk, "left_context": context}
    modes = ("graphs", "eager") if device.startswith("cuda") else ("eager",)
    for mode in modes:
        c2w.graphs = None
        if mode == "graphs":
            c2w.enable_cuda_graphs(max_batch=batch)
        stream_ms()  # first-call costs (allocator growth, cuDNN plans, graph captures) stay out of the numbers
        row[f"{mode}_ms_per_chunk"], row[f"{mode}_audio_s_per_s"] = stream_ms()
    c2w.graphs = None
    fastest = min(modes, key=lambda m: row[f"{m}_ms_per_chunk"])
    row["ms_per_chunk"], row["audio_s_per_s"] = row[f"{fastest}_ms_per_chunk"], row[f"{fastest}_audio_s_per_s"]
    return row


def provenance(device: str, args: argparse.Namespace) -> dict[str, Any]:
    try:
        git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
        commit = git.stdout.strip()
    except OSError:
        commit = ""
    # the GPU machine's copy may carry an older HEAD: the caller's commit wins there
    commit = os.environ.get("OMNIMESH_COMMIT") or commit
    name = torch.cuda.get_device_name() if device.startswith("cuda") else platform.processor() or "cpu"
    return {"commit": commit, "date": datetime.now(timezone.utc).isoformat(), "device": name,
            "torch": torch.__version__, "command": " ".join(["bench/talker/bench_talker.py", *args.argv]),
            "weights": "random", "workload": "talker step + code predictor; streaming Code2Wav"}  # fmt: skip


PATHS = ("eager", "graphs", "graphs-dense")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    parser.add_argument("--tiny", action="store_true", help="demo-checkpoint dims on CPU, fp32: a smoke test")
    parser.add_argument("--batches", type=int, nargs="+", default=None, help="talker batch sizes (default 1 8 32)")
    parser.add_argument("--steps", type=int, default=None, help="measured talker steps per batch size")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=None,
                        help="talker step paths to time (default: eager and graphs on CUDA, eager on CPU); "
                             "graphs-dense: graphs with the code predictor's steps as persistent launches")
    parser.add_argument("--frames-only", action="store_true", help="time the frames only: no prefill or Code2Wav")
    parser.add_argument("--routing", choices=ROUTING_MODES, default="balanced",
                        help="balanced (default): the routers calibrated to spread a batch as a trained model's do "
                             "(bench/moe_routing.py); native: the drawn weights' own routing")
    args = parser.parse_args(argv)
    args.argv = argv or []
    device = "cpu" if args.tiny or not torch.cuda.is_available() else "cuda"
    dtype = torch.float32 if args.tiny else torch.bfloat16
    cfg = parse_talker_config(demo_config() if args.tiny else real_config())
    paths = args.paths or (["eager"] if device == "cpu" else ["eager", "graphs"])
    batches = args.batches or ([1, 2] if args.tiny else [1, 8, 32])
    steps = args.steps or (3 if args.tiny else 50)
    torch.manual_seed(0)
    model = random_model(cfg, device, dtype)
    with torch.no_grad():
        calibration = calibrate_routing(model, max(batches), 4 if args.tiny else 32) if args.routing == "balanced" \
            else None
        routed = routing(model, args.routing, batches, 4 if args.tiny else 16)
        warmup = 2 if args.tiny else 10
        talker = [bench_talker(model, b, warmup, steps, device, path) for b in batches for path in paths]
        prefill_paths = [] if args.frames_only else [p == "graphs" for p in paths if p != "graphs-dense"]
        prefill = [bench_prefill(model, b, 20, 3 if args.tiny else 10, device, fast) for b in batches
                   for fast in prefill_paths]  # fmt: skip
        chunks = 2 if args.tiny else 8
        code2wav = [] if args.frames_only else [bench_code2wav(model, b, c, 11, chunks, device) for b in batches
                                                for c in (4, 25)]  # fmt: skip
    result = {**provenance(device, args), "dtype": str(dtype), "dims": asdict(cfg.lm), "routing": routed,
              "routing_calibration": calibration, "talker": talker,
              "prefill": prefill, "code2wav": code2wav}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()

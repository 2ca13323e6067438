"""Thinker replicas behind the gateway (issue 19): a multi-turn chat workload routed prefix_aware against
round_robin in the same run, on the same replicas, at each concurrency.

One `omnimesh up` starts the replicas (thinker.replicas, each on its device); two gateways of the bench's own,
started alike, route over them, one prefix_aware (`--margin`), one round_robin. At each concurrency c, each policy
in turn (the order alternates per level) runs c streams; a stream holds conversations of `--turns` turns, all
sharing one system prompt (a new one per policy run, so no run hits another's blocks), each turn's prompt the whole
history (system, the earlier turns with the answers the model gave, the new user message); with `--context-tokens`
a conversation's first message carries a document of its own. A stream's first conversation is warm-up. Per run:
output tok/s and TTFT p50/p99 at the client (docs/benchmarks.md), the replicas' prefix-cache hit rate (their own
omnimesh_prefix_cache_* counters) and the gateway's routing decisions.

    PYTHONPATH=.:protos python3 bench/thinker/bench_replicas.py --random-weights --devices cuda:0 cuda:0 \
        --kv-cache-gib 6 --out bench/results/thinker-replicas-h200.json       # two replicas on one H200
    python3 bench/thinker/bench_replicas.py --tiny --out /tmp/replicas.json     # CPU smoke test (demo checkpoint)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bench.thinker.bench_thinker import free_cuda, provenance_of  # noqa: E402
from bench.thinker.gateway_loop import Mesh  # noqa: E402
from bench.thinker.stage_counters import measured_phase  # noqa: E402
from bench.thinker.workload import PromptMaker, RequestRecord, percentile, read_timing, summarize  # noqa: E402
from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402
from runtime.server import READY_PREFIX  # noqa: E402
from services.thinker.model.config import ThinkerConfig  # noqa: E402

POLICIES = ("round_robin", "prefix_aware")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/thinker/bench_replicas.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tiny", action="store_true", help="the demo checkpoint on CPU: a smoke test")
    which.add_argument("--random-weights", action="store_true", help="released dims, random bf16 weights with "
                       "balanced routing, written as a checkpoint first (the default off --tiny and --model)")
    which.add_argument("--model", type=Path, help="a checkpoint directory")
    p.add_argument("--layers", type=int, default=None, help="--random-weights with this many decoder layers instead of "
                   "48 (a smaller GPU holds two replicas; each result records it)")
    p.add_argument("--ckpt-dir", type=Path, help="where --random-weights writes (default: /dev/shm or tmp)")
    p.add_argument("--devices", nargs="+", default=None, help="one per replica (default: cuda:0 cuda:0; cpu cpu "
                   "with --tiny)")
    # two released thinkers hold ~118 GiB of an H200's ~139: 6 GiB each is ~65k tokens of KV
    p.add_argument("--kv-cache-gib", type=float, default=None, help="per replica (default 6; 1/16 with --tiny)")
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--state-snapshots", type=int, default=None,
                   help="thinker.engine.num_state_snapshots of a hybrid model (Qwen3.5; default: the engine's)")
    p.add_argument("--late-launch", action="store_true",
                   help="thinker.engine.late_launch: a step run ahead is launched just before the running one ends")
    p.add_argument("--margin", type=int, default=8, help="gateway.thinker_routing_margin of the prefix_aware run")
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 32])
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--conversations-per-stream", type=int, default=3, help="the first of each stream is warm-up")
    p.add_argument("--system-tokens", type=int, default=1024, help="the shared system prompt")
    p.add_argument("--context-tokens", type=int, default=0,
                   help="a document of its own (about this many tokens) in each conversation's first user message, "
                        "as an image or a file a user asks several questions about: the history the routing keeps "
                        "or loses outweighs the shared system prompt every replica caches (0: none)")
    p.add_argument("--user-tokens", type=int, default=128, help="each user message")
    p.add_argument("--output-tokens", type=int, default=128, help="each answer's mean length (greedy, ignore_eos): "
                   "drawn per turn from [1/2, 3/2] of it, so streams fall out of step")
    p.add_argument("--ready-timeout", type=float, default=1800.0)
    args = p.parse_args(argv)
    if args.tiny:
        args.devices = args.devices or ["cpu", "cpu"]
        args.kv_cache_gib = args.kv_cache_gib or 1 / 16
    else:
        args.devices = args.devices or ["cuda:0", "cuda:0"]
        args.kv_cache_gib = args.kv_cache_gib or (6.0 if on_gpu(args) else 1 / 16)
    return args


def random_checkpoint(args: argparse.Namespace, template_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The released dims with random weights, routers balanced as bench_thinker does, written for the replicas."""
    from bench.thinker.balance import balance_routing
    from bench.thinker.random_model import random_model, real_config, write_checkpoint

    config, device, dtype = real_config(), torch.device("cuda"), torch.bfloat16
    if args.layers:
        config["thinker_config"]["text_config"]["num_hidden_layers"] = args.layers
    model = random_model(config, device, dtype)
    calibration = balance_routing(model, PromptMaker(template_dir, args.user_tokens), device, dtype)
    base = args.ckpt_dir or (Path("/dev/shm") if Path("/dev/shm").exists() else Path(tempfile.gettempdir()))
    base.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix="thinker-random-", dir=base))
    write_checkpoint(model, config, out, template_dir)
    del model
    free_cuda()
    return out, calibration


def on_gpu(args: argparse.Namespace) -> bool:
    return all(d.startswith("cuda") for d in args.devices)


def thinker_section(args: argparse.Namespace) -> dict[str, Any]:
    engine = {"kv_cache_bytes": int(args.kv_cache_gib * 2**30), "max_num_seqs": args.max_num_seqs,
              "max_batch_tokens": max(2048, args.max_num_seqs)}
    if args.state_snapshots is not None:
        engine["num_state_snapshots"] = args.state_snapshots
    if args.late_launch:
        engine["late_launch"] = True
    return {"replicas": len(args.devices), "devices": args.devices,
            "dtype": "bfloat16" if on_gpu(args) else "float32", "engine": engine}


def start_gateway(model_dir: Path, addresses: list[str], policy: str, margin: int, workdir: Path,
                  log: Any) -> tuple[Any, dict]:
    """A gateway of its own on the replicas, routing by `policy`; -> (process, its announced ports). Each policy
    gets one started the same way, so the comparison holds nothing but the policy apart (the H100 runs of
    2026-12-06 had prefix_aware on `omnimesh up`'s gateway and round_robin on one like this)."""
    off = {"enabled": False}
    config = workdir / f"gateway-{policy}.yaml"
    config.write_text(yaml.safe_dump({"thinker": {"addresses": addresses}, "vision": off, "audio": off,
                                      "talker": off, "gateway": {"thinker_routing": policy,
                                                                 "thinker_routing_margin": margin}}))
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--model", str(model_dir), "--config", str(config),
                             "--port", "0", "--metrics-port", "0", "--replica", f"gateway-{policy}"],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(READY_PREFIX):
            return proc, json.loads(line[len(READY_PREFIX):])
    raise RuntimeError(f"the {policy} gateway exited ({proc.wait()}) before it was ready")


def counters(metrics_port: int, names: tuple[str, ...]) -> dict[tuple[str, tuple], float]:
    """Samples of `names` on a /metrics endpoint, keyed by (name, sorted label items less the common ones)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in names:
                labels = tuple(sorted((k, v) for k, v in s.labels.items()
                                      if k not in ("stage", "replica", "model_name")))
                out[(s.name, labels)] = s.value
    return out


class Workload:
    """Multi-turn conversations on one shared system prompt, texts made once per run."""

    def __init__(self, template_dir: Path, args: argparse.Namespace) -> None:
        self.args = args
        self.turn_of: dict[int, int] = {}  # record index -> its turn in the conversation (a run's records)
        self.system = PromptMaker(template_dir, args.system_tokens)
        self.user = PromptMaker(template_dir, args.user_tokens)
        self.context = PromptMaker(template_dir, args.context_tokens) if args.context_tokens else None

    async def run(self, address: str, concurrency: int, seed: int) -> list[RequestRecord]:
        system = self.system.make(seed).text
        records: list[RequestRecord] = []
        self.turn_of = {}
        async with grpc.aio.insecure_channel(address) as channel:
            stub = omni_pb2_grpc.OmniStub(channel)
            await asyncio.gather(*(self._stream(stub, system, seed, s, records) for s in range(concurrency)))
        return records

    async def _stream(self, stub: omni_pb2_grpc.OmniStub, system: str, seed: int, stream: int,
                      records: list[RequestRecord]) -> None:
        """Streams do not move in step, as users do not: each starts up to 250 ms late and each answer's length is
        drawn. In step (every answer the same length, every stream started at once) each wave of turns reached the
        gateway in the same order, and round_robin sent every stream to the same replica turn after turn: as sticky
        as prefix_aware, its hit rate 0.83 (bench/thinker/NOTES-replicas.md)."""
        a = self.args
        rng = random.Random(seed * 1000 + stream)
        await asyncio.sleep(rng.uniform(0.0, 0.25))
        for conv in range(a.conversations_per_stream):
            history = [omni_pb2.Message(role="system", content=[omni_pb2.ContentPart(text=system)])]
            for turn in range(a.turns):
                index = ((seed * 1000 + stream) * 100 + conv) * 10 + turn
                text = self.user.make(index).text
                if turn == 0 and self.context is not None:
                    text = f"{self.context.make(index).text}\n\n{text}"
                history.append(omni_pb2.Message(role="user", content=[omni_pb2.ContentPart(text=text)]))
                rec = RequestRecord(len(records), time.perf_counter(), measured=conv > 0)
                records.append(rec)
                self.turn_of[rec.index] = turn
                tokens = rng.randint(max(1, a.output_tokens // 2), max(1, a.output_tokens * 3 // 2))
                sampling = common_pb2.SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
                answer = []
                call = stub.Chat(omni_pb2.ChatRequest(messages=history, sampling=sampling,
                                                      output_modalities=[omni_pb2.MODALITY_TEXT]))
                async for ev in call:
                    if ev.HasField("text"):
                        rec.add(time.perf_counter(), len(ev.text.token_ids))
                        answer.append(ev.text.text)
                    elif ev.HasField("error"):
                        raise RuntimeError(f"stream {stream}: {ev.error.code} {ev.error.message}")
                rec.end = time.perf_counter()
                await read_timing(call, rec)
                # random weights may answer with tokens that decode to nothing; an empty message is refused
                reply = "".join(answer) or "..."
                history.append(omni_pb2.Message(role="assistant", content=[omni_pb2.ContentPart(text=reply)]))


def measure(workload: Workload, mesh: Mesh, address: str, gateway_metrics: int, c: int, seed: int) -> dict:
    hit_names = ("omnimesh_prefix_cache_hits_total", "omnimesh_prefix_cache_queries_total")
    thinkers = [p["metrics_port"] for name, p in mesh.ports.items() if name.startswith("thinker")]
    routed_names = ("omnimesh_thinker_routed_total",)
    before = [counters(port, hit_names) for port in thinkers], counters(gateway_metrics, routed_names)
    with measured_phase(mesh.readings) as phase:
        records = asyncio.run(workload.run(address, c, seed))
    level = summarize(records, c)
    after = [counters(port, hit_names) for port in thinkers], counters(gateway_metrics, routed_names)
    per_replica = []
    for b, a in zip(before[0], after[0]):
        hits, queries = (sum(v - b.get(k, 0.0) for k, v in a.items() if k[0] == name) for name in hit_names)
        per_replica.append({"hit_tokens": hits, "queried_tokens": queries})
    hits = sum(r["hit_tokens"] for r in per_replica)
    queries = sum(r["queried_tokens"] for r in per_replica)
    routed = {" ".join(f"{k}={v}" for k, v in key[1]): value - before[1].get(key, 0.0)
              for key, value in after[1].items()}
    level.pop("raw")
    # each replica's steps (rows a step, step and queue ms): an uneven split or a queue shows here
    stages = {name: summary for name, summary in phase.stages.items() if name.startswith("thinker")}
    by_turn = {}
    for turn in range(workload.args.turns):
        ttft = [(r.first - r.start) * 1e3 for r in records
                if r.measured and r.first is not None and workload.turn_of[r.index] == turn]
        by_turn[turn] = percentile(ttft, 50)
    return {**level, "prefix_hit_rate": hits / queries if queries else None, "replicas": per_replica,
            "routed": {k: v for k, v in routed.items() if v}, "ttft_ms_p50_by_turn": by_turn,
            "replica_steps": stages}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    template_dir = resolve_model("demo")  # tokenizer and chat template (the real Qwen vocabulary)
    device = torch.device("cuda" if on_gpu(args) else "cpu")
    command = " ".join(["bench/thinker/bench_replicas.py", *(sys.argv[1:] if argv is None else argv)])
    result: dict[str, Any] = {**provenance_of(command, device),
                              "workload": {"name": "multi-turn text->text", "load": "closed loop",
                                           **{k: getattr(args, k) for k in ("turns", "conversations_per_stream",
                                                                            "system_tokens", "context_tokens",
                                                                            "user_tokens", "output_tokens")},
                                           "greedy": True, "ignore_eos": True},
                              "replicas": thinker_section(args), "margin": args.margin,
                              "target": {"ttft_p50_reduction": 0.30},  # issue 19: prefix_aware over round_robin
                              "levels": []}

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))

    model_dir = template_dir if args.tiny else args.model
    written = model_dir is None
    if written:
        model_dir, result["routing_calibration"] = random_checkpoint(args, template_dir)
        save()
    result["decoder_layers"] = ThinkerConfig.from_checkpoint(model_dir).num_layers  # any family's layout
    workdir = Path(tempfile.mkdtemp(prefix="bench-routing-"))
    log_path = args.out.with_suffix(".mesh.log")
    with open(log_path, "w") as log:
        t0 = time.perf_counter()
        mesh = Mesh(model_dir, thinker_section(args), workdir, log, args.ready_timeout)
        procs = []
        try:
            addresses = [f"127.0.0.1:{p['grpc_port']}" for n, p in mesh.ports.items() if n.startswith("thinker")]
            gateways = {}
            for policy in POLICIES:
                proc, ports = start_gateway(model_dir, addresses, policy, args.margin, workdir, log)
                procs.append(proc)
                gateways[policy] = (f"127.0.0.1:{ports['grpc_port']}", ports["metrics_port"])
            result["startup_s"] = time.perf_counter() - t0
            workload = Workload(template_dir, args)
            seed = 0
            for i, c in enumerate(args.concurrency):
                level: dict[str, Any] = {"concurrency": c}
                for policy in POLICIES if i % 2 == 0 else POLICIES[::-1]:
                    seed += 1
                    level[policy] = measure(workload, mesh, *gateways[policy], c, seed)
                    print(f"c={c} {policy}: {level[policy]['output_tok_s'] or 0:.1f} tok/s, TTFT p50 "
                          f"{level[policy]['ttft_ms_p50'] or 0:.1f} ms, hit rate "
                          f"{level[policy]['prefix_hit_rate'] or 0:.3f}", flush=True)
                aware, robin = level["prefix_aware"], level["round_robin"]
                if aware["ttft_ms_p50"] and robin["ttft_ms_p50"]:
                    level["ttft_p50_reduction"] = 1 - aware["ttft_ms_p50"] / robin["ttft_ms_p50"]
                    level["tok_s_ratio"] = (aware["output_tok_s"] or 0) / (robin["output_tok_s"] or 1)
                result["levels"].append(level)
                save()
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)
            result["mesh_exit"] = mesh.stop()
    result["mesh_log"] = str(log_path)
    if written:  # ~59 GiB in /dev/shm
        shutil.rmtree(model_dir, ignore_errors=True)
    save()
    return result


if __name__ == "__main__":
    main()

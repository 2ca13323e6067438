"""The HTTP front's overhead against the gRPC path on one deployment: closed-loop text->text streams at each
concurrency through omnimesh.AsyncClient (gRPC to the gateway) and through the HTTP front (which is a gRPC client of
the same gateway), read by the official `openai` package or as raw SSE lines; tok/s and time to first token.

By default every worker alternates the two paths, so both see one load and one drift: separate runs of each path
differed by up to 16% from run to run of the same path on a 2-core machine, more than the overhead being measured.

    .venv/bin/python bench/http/overhead.py --out overhead.json                   # starts a demo mesh (CPU)
    .venv/bin/python bench/http/overhead.py --grpc-addr H:P --http-url http://H:P/v1 --out overhead.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
MESH_PREFIX = "OMNIMESH_MESH "
TEXT_ONLY = ("vision: {{enabled: false}}\naudio: {{enabled: false}}\ntalker: {{enabled: false}}\n"
             "thinker: {{cpu_threads: {threads}, engine: {{kv_cache_bytes: 67108864, max_num_seqs: 32, "
             "token_flush_ms: 5.0}}}}\n")


class Sample(NamedTuple):
    ttft_s: float
    tokens: int
    duration_s: float = 0.0  # send to the stream's end


async def grpc_one(client: object, prompt: str, max_tokens: int) -> Sample:
    from omnimesh import TextDelta

    t0 = time.perf_counter()
    ttft, tokens = None, 0
    async for event in client.chat_stream(prompt, max_tokens=max_tokens, ignore_eos=True, temperature=0.0):
        if isinstance(event, TextDelta):
            if event.text and ttft is None:  # first visible text, as on the HTTP path
                ttft = time.perf_counter() - t0
            tokens += len(event.token_ids)
    return Sample(ttft or 0.0, tokens, time.perf_counter() - t0)


async def http_one(client: object, prompt: str, max_tokens: int) -> Sample:
    t0 = time.perf_counter()
    ttft, tokens = None, 0
    stream = await client.chat.completions.create(
        model="omni", messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            ttft = ttft if ttft is not None else time.perf_counter() - t0
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return Sample(ttft or 0.0, tokens, time.perf_counter() - t0)


async def raw_one(client: object, prompt: str, max_tokens: int) -> Sample:
    """The same request with a bare HTTP client reading SSE lines: no per-chunk parsing on the client's CPU."""
    body = {"model": "omni", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    t0 = time.perf_counter()
    ttft, tokens = None, 0
    async with client.stream("POST", "chat/completions", json=body) as answer:
        async for line in answer.aiter_lines():
            if ttft is None and '"content":"' in line and '"role"' not in line:
                ttft = time.perf_counter() - t0
            elif line.startswith('data: {') and '"usage":{' in line:
                tokens = json.loads(line[6:])["usage"]["completion_tokens"]
    return Sample(ttft or 0.0, tokens, time.perf_counter() - t0)


async def closed_loop(one: object, client: object, concurrency: int, requests: int, max_tokens: int) -> dict:
    """`concurrency` workers send `requests` streams in all, each the next as soon as its last ended."""
    todo = iter(range(requests))
    samples: list[Sample] = []

    async def worker() -> None:
        for i in todo:
            samples.append(await one(client, f"Request {i}: tell me a story", max_tokens))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    ttfts = sorted(s.ttft_s for s in samples)
    return {"tok_per_s": sum(s.tokens for s in samples) / wall, "ttft_p50_ms": 1e3 * statistics.median(ttfts),
            "ttft_p90_ms": 1e3 * ttfts[int(0.9 * (len(ttfts) - 1))], "requests": len(samples), "wall_s": wall}


async def interleaved_loop(paths: dict, concurrency: int, requests: int, max_tokens: int) -> dict[str, list[Sample]]:
    """`concurrency` workers send `requests` streams in all, each worker alternating gRPC and HTTP (half the workers
    start with each), so both paths run side by side under the same load and the same drift."""
    todo = iter(range(requests))
    samples: dict[str, list[Sample]] = {"grpc": [], "http": []}

    async def worker(w: int) -> None:
        for k, i in enumerate(todo):
            path = ("grpc", "http")[(w + k) % 2]
            one, client = paths[path]
            samples[path].append(await one(client, f"Request {i}: tell me a story", max_tokens))

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return samples


def compare_interleaved(rounds: list[dict[str, list[Sample]]]) -> dict:
    """Per path over every round's streams: the mean stream duration (a closed loop's tok/s is the concurrency times
    tokens over it, so the tok/s overhead is 1 - grpc/http of it), TTFT p50, and the overhead of each round alone."""
    def stats(samples: list[Sample]) -> dict:
        return {"streams": len(samples), "tokens": sum(s.tokens for s in samples),
                "duration_mean_ms": 1e3 * statistics.fmean(s.duration_s for s in samples),
                "duration_p50_ms": 1e3 * statistics.median(s.duration_s for s in samples),
                "ttft_p50_ms": 1e3 * statistics.median(s.ttft_s for s in samples)}

    def overhead(by_path: dict[str, dict]) -> float:
        return 100 * (1 - by_path["grpc"]["duration_mean_ms"] / by_path["http"]["duration_mean_ms"])

    pooled = {p: stats([s for r in rounds for s in r[p]]) for p in ("grpc", "http")}
    return {**pooled, "overhead_tok_per_s_pct": overhead(pooled),
            "overhead_by_round_pct": [overhead({p: stats(r[p]) for p in r}) for r in rounds],
            "ttft_p50_extra_ms": pooled["http"]["ttft_p50_ms"] - pooled["grpc"]["ttft_p50_ms"]}


async def measure(args: argparse.Namespace, grpc_addr: str, http_url: str) -> dict:
    import openai

    from omnimesh import AsyncClient

    grpc_client = AsyncClient(grpc_addr, api_key=args.api_key)
    if args.http_client == "openai":
        http_client = openai.AsyncOpenAI(base_url=http_url, api_key=args.api_key or "none", max_retries=0,
                                         timeout=600)
    else:
        headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        httpx = _httpx()  # as many kept-alive connections as streams (its default keeps 20: c = 32 reconnected 12)
        http_client = httpx.AsyncClient(base_url=http_url.rstrip("/") + "/", headers=headers, timeout=600,
                                        limits=httpx.Limits(max_keepalive_connections=max(args.concurrency)))
    http = http_one if args.http_client == "openai" else raw_one
    paths = {"grpc": (grpc_one, grpc_client), "http": (http, http_client)}
    warm = max(args.concurrency)  # warm-up: the engine, and as many pooled HTTP connections as any run uses
    await closed_loop(grpc_one, grpc_client, warm, warm, args.max_tokens)
    await closed_loop(http, http_client, warm, warm, args.max_tokens)
    results: dict = {}
    for c in args.concurrency:
        requests = max(c, args.requests or max(16, 4 * c))
        if args.method == "interleaved":
            rounds = [await interleaved_loop(paths, c, 2 * requests, args.max_tokens) for _ in range(args.rounds)]
            results[str(c)] = summary = compare_interleaved(rounds)
        else:
            results[str(c)] = summary = compare(await separate_loops(paths, c, requests, args))
        print(f"c={c}: tok/s overhead {summary['overhead_tok_per_s_pct']:+.1f}% (by round "
              f"{', '.join(f'{o:+.1f}' for o in summary['overhead_by_round_pct'])}); TTFT p50 grpc "
              f"{summary['grpc']['ttft_p50_ms']:.1f} ms, http {summary['http']['ttft_p50_ms']:.1f} ms", flush=True)
    await grpc_client.close()
    await (http_client.close() if args.http_client == "openai" else http_client.aclose())
    return results


async def separate_loops(paths: dict, concurrency: int, requests: int, args: argparse.Namespace) -> dict:
    """Each path's own closed loop, in turn; which goes first alternates by round, so drift hits both alike."""
    runs: dict[str, list[dict]] = {"grpc": [], "http": []}
    for r in range(args.rounds):
        for path in ("grpc", "http") if r % 2 == 0 else ("http", "grpc"):
            one, client = paths[path]
            runs[path].append(await closed_loop(one, client, concurrency, requests, args.max_tokens))
    return runs


def compare(runs: dict[str, list[dict]]) -> dict:
    """Each path's median over its runs, the overhead between those, and each round's own overhead (their spread is
    the noise an overhead must stand out of)."""
    med = {p: {k: statistics.median(r[k] for r in rs) for k in ("tok_per_s", "ttft_p50_ms")} for p, rs in runs.items()}
    return {"runs": runs, **med,
            "overhead_tok_per_s_pct": 100 * (1 - med["http"]["tok_per_s"] / med["grpc"]["tok_per_s"]),
            "overhead_by_round_pct": [100 * (1 - h["tok_per_s"] / g["tok_per_s"])
                                      for g, h in zip(runs["grpc"], runs["http"])],
            "ttft_p50_extra_ms": med["http"]["ttft_p50_ms"] - med["grpc"]["ttft_p50_ms"]}


def _httpx() -> object:
    """The HTTP client the installed openai package is built on (httpx, or its successor httpx2)."""
    try:
        import httpx
    except ImportError:
        import httpx2 as httpx
    return httpx


def start_mesh(thinker_cpu_threads: int = 0) -> tuple[object, str, str]:
    """`omnimesh up --model demo --http-port 0`, text only; its process and the two addresses."""
    sys.path.insert(0, str(REPO))
    from tests.integration.mesh_process import OMNIMESH, start

    config = Path(tempfile.mkdtemp(prefix="omnimesh-overhead-")) / "mesh.yaml"
    config.write_text(TEXT_ONLY.format(threads=thinker_cpu_threads))
    # the console script where the package is installed (make setup), else the module (a bare GPU-machine image)
    command = [OMNIMESH] if Path(OMNIMESH).exists() else [sys.executable, "-m", "gateway.cli.main"]
    mesh = start([*command, "up", "--model", "demo", "--port", "0", "--http-port", "0", "--config", str(config),
                  "--log-level", "WARNING"], MESH_PREFIX, timeout=600)
    ports = mesh.ports
    return mesh, f"127.0.0.1:{ports['gateway']['grpc_port']}", f"http://127.0.0.1:{ports['http']['http_port']}/v1"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grpc-addr", help="a running gateway (with --http-url); default: start a demo mesh")
    p.add_argument("--http-url", help="the HTTP front in front of that gateway, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--api-key", default=None)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--requests", type=int, default=0,
                   help="streams per path and run (default 4 x the concurrency, at least 16: several waves)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5, help="runs per concurrency (and path, if separate)")
    p.add_argument("--method", choices=("interleaved", "separate"), default="interleaved",
                   help="interleaved: each worker alternates the paths, both under one load (drift cancels); "
                        "separate: each path's own closed loop in turn, the medians of its runs compared")
    p.add_argument("--http-client", choices=("openai", "raw"), default="openai",
                   help="openai: the official SDK; raw: SSE lines unparsed (less client CPU beside the server's)")
    p.add_argument("--thinker-cpu-threads", type=int, default=0,
                   help="the started demo mesh's thinker torch threads (0: the stage's default, every core but one, "
                        "which leaves a core to the gateway, front and client)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    mesh = None
    if args.grpc_addr and args.http_url:
        grpc_addr, http_url = args.grpc_addr, args.http_url
    else:
        mesh, grpc_addr, http_url = start_mesh(args.thinker_cpu_threads)
    try:
        results = asyncio.run(measure(args, grpc_addr, http_url))
    finally:
        if mesh is not None:
            mesh.stop()
    sys.path.insert(0, str(REPO))
    import torch

    from bench.thinker.bench_thinker import provenance_of

    command = "python bench/http/overhead.py " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.write_text(json.dumps({**provenance_of(command, torch.device("cpu")), "cpus": os.cpu_count(),
                                    "max_tokens": args.max_tokens, "requests": args.requests,
                                    "method": args.method, "http_client": args.http_client,
                                    "thinker_cpu_threads": None if args.grpc_addr else args.thinker_cpu_threads,
                                    "by_concurrency": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The sweep: each workload at each concurrency against one deployment, then the JSON result (and the plot)."""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from omnimesh import AsyncClient, OmnimeshError
from gateway.cli.remote_bench.drivers import GrpcDriver, OpenAIDriver, Refused
from gateway.cli.remote_bench.load import closed_loop, summarize
from gateway.cli.remote_bench.report import plot, provenance
from gateway.cli.remote_bench.workloads import NEEDS, SLOW_TO_MAKE, WORKLOADS, Request


def base_url(addr: str) -> str:
    """HOST:PORT -> http://HOST:PORT/v1; a URL stays as given."""
    return addr if addr.startswith(("http://", "https://")) else f"http://{addr}/v1"


async def deployment(args: argparse.Namespace) -> dict[str, Any]:
    """What the gRPC API says of the deployment: model, build, family, devices (an OpenAI server says none)."""
    async with AsyncClient(args.addr, api_key=args.api_key, timeout=30) as client:
        info = await client.info()
    return {"model": info.model, "build": info.build, "model_family": info.model_family, "device": info.devices,
            "serves": {"in": list(info.input_modalities), "out": list(info.output_modalities)}}


async def sweep(args: argparse.Namespace) -> dict[str, Any]:
    result = provenance(args.api, args.addr)
    result |= {"output_tokens": args.output_tokens, "workloads": {}, "skipped": {}, "failed": {}}
    if args.api == "grpc":
        result |= await deployment(args)
        driver = GrpcDriver.connect(args.addr, args.api_key, args.output_tokens, args.connections)
    else:
        result["device"] = "not reported by the OpenAI API"
        driver = OpenAIDriver(base_url(args.addr), args.api_key, args.output_tokens, args.model_name)
        result["model"] = await driver.model_name()
    try:
        for name in args.workloads:
            needs = NEEDS[name]
            if "serves" in result and (needs[0] not in result["serves"]["in"]
                                       or needs[1] not in result["serves"]["out"]):
                result["skipped"][name] = f"the deployment serves {result['serves']}; {name} needs {needs}"
                continue
            levels = result["workloads"][name] = []
            try:
                await run_workload(args, driver, name, levels)
            except Refused as err:
                del result["workloads"][name]
                result["skipped"][name] = str(err)
            except OmnimeshError as err:  # the levels measured before it stay in the result
                result["failed"][name] = f"at c={args.concurrency[len(levels)]}: {err}"
    finally:
        await driver.close()
    return result


async def run_workload(args: argparse.Namespace, driver: GrpcDriver | OpenAIDriver, name: str,
                       levels: list[dict]) -> None:
    """Each concurrency level of workload `name` in turn, appended to `levels` as it completes."""
    make = WORKLOADS[name]
    ready: dict[int, Request] = {}

    async def one(index: int, rec: Any) -> None:
        request = ready.pop(index, None) or make(index)
        rec.start = time.perf_counter()  # timed from its send: making the input is the client's work
        await driver.send(request, rec)

    first_index = 0
    for c in args.concurrency:
        measured = max(args.min_measured, args.measured_per_stream * c)
        if name in SLOW_TO_MAKE:  # made before the level, on every core: making them inline would stall the loop
            ready = prepare(make, range(first_index, first_index + measured + 2 * c))
        records = await closed_loop(one, c, measured, first_index)
        first_index += len(records)
        level = summarize(records, c)
        levels.append(level)
        print(f"{name} c={c}: {level['output_tok_s']:.1f} tok/s, TTFT p50 {level['ttft_ms_p50']:.1f} ms "
              f"p99 {level['ttft_ms_p99']:.1f} ms, ITL p50 {_ms(level['itl_ms_p50'])}", file=sys.stderr, flush=True)


def prepare(make: Callable[[int], Request], indices: range) -> dict[int, Request]:
    # spawned, not forked: this process runs gRPC threads, which a fork would copy mid-call
    with ProcessPoolExecutor(mp_context=multiprocessing.get_context("spawn")) as pool:
        return dict(zip(indices, pool.map(make, indices)))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def run(args: argparse.Namespace) -> int:
    if args.api == "openai" and importlib.util.find_spec("openai") is None:  # a test extra, not a dependency
        print("omnimesh bench --api openai: needs the openai package (pip install openai)", file=sys.stderr)
        return 2
    try:
        result = asyncio.run(sweep(args))
    except (OmnimeshError, RuntimeError, OSError) as err:
        print(f"omnimesh bench: {err}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    picture = plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out}" + (f" and {picture}" if picture else " (no plot: matplotlib is not installed)"),
          file=sys.stderr)
    for name, err in result.get("failed", {}).items():
        print(f"omnimesh bench: {name} failed {err}", file=sys.stderr)
    return 1 if result.get("failed") else 0

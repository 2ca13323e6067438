"""The walking mesh: `omnimesh up` on the demo checkpoint, then `omnimesh chat` clients, as a user runs them."""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import grpc

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from tests.integration.client import chat_request, run_concurrent
from tests.integration.mesh_process import OMNIMESH, Proc, metric_value, scrape


def chat_json(addr: str, text: str, *flags: str, timeout: float = 120) -> tuple[int, list[dict]]:
    out = subprocess.run([OMNIMESH, "chat", "--addr", addr, "--json", *flags, text], capture_output=True, text=True,
                         timeout=timeout)
    return out.returncode, [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def test_chat_streams_text_then_usage_then_done(gateway_addr: str) -> None:
    code, events = chat_json(gateway_addr, "Hello", "--max-tokens", "12", "--seed", "7")
    assert code == 0, events
    kinds = [e["type"] for e in events]
    assert kinds[-2:] == ["usage", "done"]
    assert set(kinds[:-2]) == {"text"}
    tokens = [t for e in events if e["type"] == "text" for t in e["token_ids"]]
    assert len(tokens) == events[-2]["completion_tokens"]
    assert events[-2]["prompt_tokens"] == 9  # <|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n
    assert events[-1]["finish_reason"] in ("stop", "length")


def test_chat_json_logprobs_carry_each_tokens_text(demo_ckpt, gateway_addr: str) -> None:
    """--logprobs N: every generated token with its text, and its N most likely tokens with theirs (greedy: the
    chosen token is the most likely one)."""
    from runtime.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(demo_ckpt)
    code, events = chat_json(gateway_addr, "Hello", "--max-tokens", "6", "--greedy", "--logprobs", "2")
    assert code == 0, events
    logprobs = [lp for e in events if e["type"] == "text" for lp in e.get("logprobs", [])]
    assert [lp["token_id"] for lp in logprobs] == [t for e in events if e["type"] == "text" for t in e["token_ids"]]
    for lp in logprobs:
        assert lp["token"] == tok.token_bytes(lp["token_id"]).decode("utf-8", "replace")
        assert len(lp["top"]) == 2 and lp["top"][0][0] == lp["token_id"]
        assert all(text == tok.token_bytes(i).decode("utf-8", "replace") for i, _, text in lp["top"])


def test_a_reader_that_leaves_early_ends_the_client_quietly(gateway_addr: str) -> None:
    """`omnimesh chat --json ... | head -1`: the client's next write meets a closed pipe; it exits without a
    traceback (status 1, as a cut-short stream is not a whole answer)."""
    proc = subprocess.Popen([OMNIMESH, "chat", "--addr", gateway_addr, "--json", "--max-tokens", "200", "Hello"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    assert json.loads(proc.stdout.readline())["type"] == "text"
    proc.stdout.close()
    code = proc.wait(timeout=120)
    err = proc.stderr.read()
    assert code == 1, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def mesh_info(addr: str) -> omni_pb2.OmniInfo:
    async def ask() -> omni_pb2.OmniInfo:
        async with grpc.aio.insecure_channel(addr) as channel:
            return await omni_pb2_grpc.OmniStub(channel).Info(common_pb2.InfoRequest(), timeout=30)

    return asyncio.run(ask())


def test_info_describes_a_text_only_mesh(gateway_addr: str) -> None:
    got = mesh_info(gateway_addr)
    assert got.gateway.stage == "gateway" and got.gateway.build
    assert [s.stage for s in got.stages] == ["thinker"]
    assert got.stages[0].limits["max_model_len"] == 1024 and got.stages[0].device == "cpu"
    assert list(got.input_modalities) == ["text"] and list(got.output_modalities) == [omni_pb2.MODALITY_TEXT]
    assert not got.voices


def test_every_sampling_flag_reaches_the_thinker(gateway_addr: str) -> None:
    """--ignore-eos runs to max_tokens; a stop token id ends the answer at that token; the penalties are accepted
    (and a bad one is named by its field)."""
    code, events = chat_json(gateway_addr, "Hello", "--ignore-eos", "--max-tokens", "6", "--greedy",
                             "--presence-penalty", "0.5", "--frequency-penalty", "0.5", "--repetition-penalty", "1.1")
    assert code == 0, events
    tokens = [t for e in events if e["type"] == "text" for t in e["token_ids"]]
    assert len(tokens) == 6 and events[-1]["finish_reason"] == "length"
    code, stopped = chat_json(gateway_addr, "Hello", "--ignore-eos", "--max-tokens", "6", "--greedy",
                              "--presence-penalty", "0.5", "--frequency-penalty", "0.5", "--repetition-penalty", "1.1",
                              "--stop-token-id", str(tokens[2]))
    assert code == 0 and stopped[-1]["finish_reason"] == "stop"
    assert [t for e in stopped if e["type"] == "text" for t in e["token_ids"]] == tokens[:tokens.index(tokens[2]) + 1]
    code, bad = chat_json(gateway_addr, "Hello", "--frequency-penalty", "7")
    assert code == 1 and bad[-1]["field_violations"][0]["field"] == "sampling.frequency_penalty"


def test_plain_output_names_an_error_on_stderr(gateway_addr: str) -> None:
    run = subprocess.run([OMNIMESH, "chat", "--addr", gateway_addr, "--top-p", "3", "hi"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 1 and run.stdout.strip() == ""
    assert "error: INVALID_ARGUMENT: sampling.top_p: is 3.0; must be in (0, 1]" in run.stderr


def test_the_info_command_prints_the_mesh(gateway_addr: str) -> None:
    plain = subprocess.run([OMNIMESH, "info", "--addr", gateway_addr], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    assert "in: text   out: text" in plain.stdout and "max_model_len=1024" in plain.stdout
    as_json = subprocess.run([OMNIMESH, "info", "--addr", gateway_addr, "--json"], capture_output=True, text=True,
                             timeout=60)
    assert json.loads(as_json.stdout)["stages"][0]["stage"] == "thinker"


def test_the_info_command_names_an_unreachable_gateway() -> None:
    dead = subprocess.run([OMNIMESH, "info", "--addr", "127.0.0.1:1", "--timeout", "2"], capture_output=True,
                          text=True, timeout=60)
    assert dead.returncode == 1 and dead.stderr.startswith("error: UNAVAILABLE") and "Traceback" not in dead.stderr


def test_plain_output_prints_the_streamed_text(gateway_addr: str) -> None:
    plain = subprocess.run([OMNIMESH, "chat", "--addr", gateway_addr, "--greedy", "--max-tokens", "8", "Hi"],
                           capture_output=True, text=True, timeout=120)
    _, events = chat_json(gateway_addr, "Hi", "--greedy", "--max-tokens", "8")
    assert plain.returncode == 0
    assert plain.stdout.rstrip("\n") == "".join(e["text"] for e in events if e["type"] == "text")
    # the summary on stderr: the token counts and, from the gateway's timing, the first token's wait and the whole
    assert re.fullmatch(r"\[\d+ prompt \+ 8 generated tokens; the first after \d+ ms, all in \d+ ms\]\n",
                        plain.stderr), plain.stderr


def test_same_seed_same_text_different_seed_differs(gateway_addr: str) -> None:
    runs = [chat_json(gateway_addr, "Tell me a story", "--seed", s, "--max-tokens", "10", "--temperature", "1.0")
            for s in ("1", "1", "2")]
    ids = [[t for e in events if e["type"] == "text" for t in e["token_ids"]] for _, events in runs]
    assert ids[0] == ids[1]
    assert ids[0] != ids[2]


def test_concurrent_cli_clients_all_complete(gateway_addr: str) -> None:
    prompts = [f"Question number {i}: what is {i} plus {i}?" for i in range(4)]
    with ThreadPoolExecutor(len(prompts)) as pool:
        results = list(pool.map(lambda p: chat_json(gateway_addr, p, "--max-tokens", "24", "--seed", "3"), prompts))
    for code, events in results:
        assert code == 0, events
        assert events[-1]["type"] == "done"
        assert events[-2]["completion_tokens"] == sum(len(e["token_ids"]) for e in events if e["type"] == "text")


def test_concurrent_streams_share_engine_steps(gateway_addr: str, mesh: Proc) -> None:
    thinker_metrics = mesh.ports["thinker"]["metrics_port"]
    before = scrape(thinker_metrics)
    sampling = common_pb2.SamplingParams(max_tokens=32, ignore_eos=True, seed=5)
    results = asyncio.run(run_concurrent(gateway_addr, [chat_request(f"Count to {i}", sampling) for i in range(6)]))
    assert all(len(tokens) == 32 for tokens, _ in results)
    after = scrape(thinker_metrics)
    steps = metric_value(after, "omnimesh_batch_size_count") - metric_value(before, "omnimesh_batch_size_count")
    single_rows = (metric_value(after, "omnimesh_batch_size_bucket", le="1.0")
                   - metric_value(before, "omnimesh_batch_size_bucket", le="1.0"))
    # Continuous batching: six streams of 32 tokens take far fewer than 192 steps, most of them multi-row.
    assert steps < 6 * 32 / 2
    assert single_rows < steps / 2


def test_cli_error_is_a_json_line_and_a_failing_exit_code(gateway_addr: str) -> None:
    code, events = chat_json(gateway_addr, "Hello", "--top-p", "0")
    assert code != 0
    assert events == [{"type": "error", "code": "INVALID_ARGUMENT",
                       "message": "sampling.top_p: is 0.0; must be in (0, 1]",
                       "field_violations": [{"field": "sampling.top_p", "description": "is 0.0; must be in (0, 1]"}]}]


def test_repeated_prompt_is_served_from_the_prefix_cache_with_equal_tokens(gateway_addr: str, mesh: Proc) -> None:
    thinker_metrics = mesh.ports["thinker"]["metrics_port"]
    text = "Summarise the following: " + " ".join(f"item {i}" for i in range(40))
    hits_before = metric_value(scrape(thinker_metrics), "omnimesh_prefix_cache_hits_total")
    first = chat_json(gateway_addr, text, "--greedy", "--max-tokens", "12")
    second = chat_json(gateway_addr, text, "--greedy", "--max-tokens", "12")
    hits = metric_value(scrape(thinker_metrics), "omnimesh_prefix_cache_hits_total") - hits_before
    assert first[0] == second[0] == 0
    # The same tokens and text; how they split into deltas depends on step timing (token_flush_ms), not the cache.
    streamed = [("".join(e["text"] for e in events if e["type"] == "text"),
                 [t for e in events if e["type"] == "text" for t in e["token_ids"]]) for _, events in (first, second)]
    assert streamed[0] == streamed[1] and streamed[0][1]
    assert second[1][-2]["cached_prompt_tokens"] > 64
    assert hits == second[1][-2]["cached_prompt_tokens"]

"""The thinker stage serving Qwen3.5 (a hybrid model): it streams greedy tokens, and with every state slot held and
no queue it answers RESOURCE_EXHAUSTED with RetryInfo naming num_state_slots (never a crash); the state-slot gauge
shows the slot held, and free again once its request is cancelled. Its CacheEvents name the blocks whose state it
kept, which routers need (a cached block past the deepest of them is not reusable)."""
from __future__ import annotations

import asyncio
import time

import grpc

from omnimesh.v1 import common_pb2, thinker_pb2, thinker_pb2_grpc

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]


def _request(max_tokens: int, prompt: list[int] = PROMPT):
    async def it():
        yield thinker_pb2.GenerateRequest(start=thinker_pb2.GenerateStart(
            request_id="qwen3.5", token_ids=prompt,
            sampling=common_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True)))
    return it()


def test_state_slots_exhausted_is_resource_exhausted_with_retry_info(qwen3_5_ckpt, tmp_path) -> None:
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    from tests.integration.mesh_process import metric_value, scrape, start_stage

    mesh = {"thinker": {"engine": {"kv_cache_bytes": 16 << 20, "max_num_seqs": 4, "num_state_slots": 1,
                                   "max_batch_tokens": 64, "max_waiting_seqs": 0}}}
    thinker = start_stage("thinker", qwen3_5_ckpt, mesh, tmp_path)
    addr = f"127.0.0.1:{thinker.ports['grpc_port']}"

    def slots_held() -> float:
        return metric_value(scrape(thinker.ports["metrics_port"]), "omnimesh_state_slot_usage_ratio")

    async def scenario() -> tuple[int, grpc.aio.AioRpcError]:
        async with grpc.aio.insecure_channel(addr) as channel:
            stub = thinker_pb2_grpc.ThinkerStub(channel)
            tokens = 0
            async for out in stub.Generate(_request(5)):
                tokens += len(out.tokens.token_ids) if out.HasField("tokens") else 0
            busy = stub.Generate(_request(400))
            await busy.read()  # the one slot is taken
            assert slots_held() == 1.0
            try:
                async for _ in stub.Generate(_request(2)):
                    pass
            except grpc.aio.AioRpcError as err:
                return tokens, err
            finally:
                busy.cancel()
        raise AssertionError("a second request was admitted past num_state_slots + max_waiting_seqs")

    try:
        tokens, err = asyncio.run(scenario())
        deadline = time.monotonic() + 10
        while slots_held() > 0:  # the cancelled request's slot comes back
            assert time.monotonic() < deadline, "the cancelled request kept its state slot"
            time.sleep(0.05)
    finally:
        assert thinker.stop() == 0
    assert tokens == 5
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "num_state_slots" in err.details()
    assert [d for d in rpc_status.from_call(err).details if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR)]


def test_cache_events_name_the_blocks_whose_state_was_kept(qwen3_5_ckpt, tmp_path) -> None:
    from runtime.engine.block_manager import prompt_block_keys
    from tests.integration.mesh_process import start_stage

    thinker = start_stage("thinker", qwen3_5_ckpt, {"thinker": {"engine": {"kv_cache_bytes": 16 << 20}}}, tmp_path)
    prompt = PROMPT[:6] + [(7 * i) % 3000 + 300 for i in range(40)] + PROMPT[6:]  # 49 tokens: 3 full blocks

    async def scenario() -> list[thinker_pb2.CacheEvent]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{thinker.ports['grpc_port']}") as channel:
            stub = thinker_pb2_grpc.ThinkerStub(channel)
            async for _ in stub.Generate(_request(2, prompt)):
                pass
            call = stub.CacheEvents(thinker_pb2.CacheEventsRequest(interval_ms=20))
            first = await call.read()
            call.cancel()
            return first

    try:
        first = asyncio.run(scenario())
    finally:
        assert thinker.stop() == 0
    keys = prompt_block_keys(prompt, (), first.block_size)
    assert first.snapshot and first.needs_state and first.prefix_cache
    assert set(keys) <= set(first.stored)
    # the state at the prompt's last full block (its one <|im_end|>, token 4, ends no full block)
    assert set(first.states_stored) == {keys[-1]}

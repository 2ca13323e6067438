"""Qwen3.5's prefix cache through the engine: a repeated system prompt and the next turn of a chat resume from a
state snapshot (hit tokens counted) and give the tokens of an engine with no prefix cache."""
from __future__ import annotations

import torch

from bench.thinker.engine_loop import text_request
from runtime.config import EngineConfig
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.sequence import Sequence
from services.thinker.build import EngineParts, build_engine
from services.thinker.model.hybrid_lm import HybridLM

IM_END = 151645
# 40 tokens ending in <|im_end|>\n: the turn's end gives a snapshot at token 32; with a question the prompt's last
# full block ends at 48, past what two questions share
SYSTEM = [151644, 8948, 198] + [(13 * i + 7) % 4000 + 300 for i in range(35)] + [151645, 198]
QUESTIONS = ([151644, 872, 198, 9707, 11, 1879, 151645, 198, 151644, 77091, 198],
             [151644, 872, 198, 40, 1079, 264, 151645, 198, 151644, 77091, 198])


def make_engine(model: HybridLM, snapshots: int) -> EngineParts:
    eng = EngineConfig(max_num_seqs=2, max_batch_tokens=64, block_size=16, num_kv_blocks=64,
                       enable_prefix_cache=snapshots > 0, num_state_snapshots=snapshots)
    return build_engine(model, eng, torch.device("cpu"), torch.float32, turn_end_tokens=frozenset({IM_END}))


def generate(parts: EngineParts, seq_id: int, prompt: list[int]) -> list[int]:
    """One request run to its end on `parts`' engine, which keeps its caches from earlier requests."""
    sampling = SamplingOptions(temperature=0.0, max_tokens=5, ignore_eos=True)
    request = text_request(prompt, parts.engine.runner.model.cfg)
    parts.engine.add(Sequence(seq_id, f"req-{seq_id}", prompt, sampling, frozenset(), request))
    tokens = []
    while parts.engine.has_work:
        events, _ = parts.engine.step()
        tokens += [e.token_id for e in events if e.token_id is not None]
    return tokens


def test_repeated_system_prompt_and_next_turn_hit_and_match_no_cache(qwen3_5_ckpt) -> None:
    model = HybridLM.load(qwen3_5_ckpt, use_kernels=False)
    turn1 = SYSTEM + QUESTIONS[0]
    plain, cached = make_engine(model, 0), make_engine(model, 4)
    want1, got1 = generate(plain, 0, turn1), generate(cached, 0, turn1)
    assert got1 == want1 and cached.scheduler.num_prefix_hit_tokens == 0
    other = SYSTEM + QUESTIONS[1]  # same system prompt, other question: resumes at the system turn's snapshot
    assert generate(cached, 1, other) == generate(plain, 1, other)
    assert cached.scheduler.num_prefix_hit_tokens == 32 and plain.scheduler.num_prefix_hit_tokens == 0
    turn2 = turn1 + want1 + [151645, 198] + QUESTIONS[1]  # the chat's next turn: resumes after turn 1's prompt
    hits_before = cached.scheduler.num_prefix_hit_tokens
    assert generate(cached, 2, turn2) == generate(plain, 2, turn2)
    assert cached.scheduler.num_prefix_hit_tokens - hits_before >= len(turn1) - 16

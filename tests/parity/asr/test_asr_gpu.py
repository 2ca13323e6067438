"""Qwen3-ASR's GPU paths against the CPU fp32 paths (which match transformers, see the parity tests beside): the
thinker's kernel path (bf16, dense fused MLP, tied head) teacher-forced, its CUDA graphs against eager steps, and
the audio encoder's CUDA-graph replay (short clips padded to whole chunks) against the CPU encoder.

OMNIMESH_ASR_CKPT names a built ASR demo checkpoint to use instead of building one (a GPU machine whose
transformers predates Qwen3-ASR)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from runtime.engine.engine import Engine, TokenEvent
from runtime.engine.sequence import Sequence
from services.audio.model import AudioEncoder
from services.thinker.graphs import GraphSettings
from services.thinker.model import ThinkerLM, prompt_positions
from services.thinker.request import MediaInput, ThinkerRequest
from tests.parity.audio.audio_reference import assert_close
from tests.parity.thinker.test_thinker_kernel_path_gpu import GREEDY, NEAR_TIE, ROW_TOL, _engine, _generate
from tests.parity.thinker.thinker_forced import forced_steps, rel_err, top2_gap
from tests.parity.thinker.thinker_reference import chat_prompt

pytestmark = pytest.mark.gpu
STEPS = 10
FRAMES = [50, 60, 100, 237, 910, 3001]  # 0.5 s (the shortest after padding) up to 30 s


@pytest.fixture(scope="module")
def ckpt(request: pytest.FixtureRequest) -> Path:
    carried = os.environ.get("OMNIMESH_ASR_CKPT")
    return Path(carried) if carried else request.getfixturevalue("asr_ckpt")


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return [chat_prompt(n, seed) + [151704] * (seed % 2) for seed, n in enumerate((4, 9, 17, 30))]


def test_thinker_kernel_path_matches_cpu(ckpt: Path, prompts: list[list[int]]) -> None:
    ref = ThinkerLM.load(ckpt)
    gpu = ThinkerLM.load(ckpt, device="cuda", dtype=torch.bfloat16)
    assert gpu.use_kernels and gpu.lm_head.weight.data_ptr() == gpu.embed_tokens.weight.data_ptr()
    want = forced_steps(ref, prompts, None, STEPS)
    got = forced_steps(gpu, prompts, want.greedy, STEPS)
    errors = [rel_err(g[i], w[i]) for g, w in zip(got.logits, want.logits) for i in range(len(prompts))]
    assert max(errors) < ROW_TOL, f"row errors {sorted(errors)[-5:]}"  # dense: no expert flips
    for g_step, w_step, w_logits in zip(got.greedy, want.greedy, want.logits):
        gaps = top2_gap(w_logits)
        assert all(a == b or gaps[i] < NEAR_TIE for i, (a, b) in enumerate(zip(g_step, w_step)))


def test_thinker_graph_replay_equals_eager(ckpt: Path, prompts: list[list[int]]) -> None:
    model = ThinkerLM.load(ckpt, device="cuda", dtype=torch.bfloat16)
    engine, runner = _engine(model, GraphSettings((1, 2, 4, 8), (32, 64), 8, 512))
    with_graphs = _generate(engine, prompts, model)
    assert any(k.startswith("decode") for k in runner.graphs.replays)
    without = _generate(_engine(model, None)[0], prompts, model)
    for i in range(len(prompts)):
        for a, b in zip(with_graphs[i], without[i]):
            if a.token_id != b.token_id:
                assert abs(b.top_logprobs[0] - b.top_logprobs[1]) < NEAR_TIE, (i, a, b)
                break


def _with_audio(engine: Engine, prompts: list[list[int]], model: ThinkerLM) -> dict[int, list[TokenEvent]]:
    """Greedy answers to prompts whose rows 1..n-2 are an audio item (random embeddings at the table's scale)."""
    scale = model.embed_tokens.weight.float().std().item()
    events: dict[int, list[TokenEvent]] = {i: [] for i in range(len(prompts))}
    for i, prompt in enumerate(prompts):
        gen = torch.Generator().manual_seed(i)
        rows = torch.randn(len(prompt) - 2, model.cfg.hidden_size, generator=gen) * scale
        pos = prompt_positions(prompt, [], model.cfg)
        media = [MediaInput("audio", 1, rows.shape[0], (), 0.0, f"clip{i}", rows.to(torch.bfloat16))]
        engine.add(Sequence(i, f"r{i}", prompt, GREEDY, frozenset(), ThinkerRequest(pos.positions, pos.rope_delta,
                                                                                     media)))
    while engine.has_work:
        for ev in engine.step()[0]:
            events[ev.seq.seq_id].append(ev)
    return events


def test_audio_rows_replay_on_prefill_graphs(ckpt: Path, prompts: list[list[int]]) -> None:
    """ASR prompts (audio rows, no deepstack) on the captured prefill graphs, the media buffer masked in, against
    eager steps: equal greedy tokens until an eager near-tie."""
    model = ThinkerLM.load(ckpt, device="cuda", dtype=torch.bfloat16)
    engine, runner = _engine(model, GraphSettings((1, 2, 4, 8), (32, 64), 8, 512))
    with_graphs = _with_audio(engine, prompts, model)
    assert runner.eager_steps == 0 and any(k.startswith("prefill") for k in runner.graphs.replays)
    without = _with_audio(_engine(model, None)[0], prompts, model)
    for i in range(len(prompts)):
        assert len(with_graphs[i]) == len(without[i]) == GREEDY.max_tokens
        for a, b in zip(with_graphs[i], without[i]):
            if a.token_id != b.token_id:
                assert abs(b.top_logprobs[0] - b.top_logprobs[1]) < NEAR_TIE, (i, a, b)
                break


@pytest.mark.parametrize("dtype, rel", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_audio_encoder_graphs_match_cpu(ckpt: Path, dtype: torch.dtype, rel: float,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    cpu = AudioEncoder.load(ckpt, "cpu", torch.float32)
    gpu = AudioEncoder.load(ckpt, "cuda", dtype, cuda_graphs=True)
    assert gpu.config.pad_short_clips
    torch.manual_seed(0)
    mels = [torch.randn(128, t) for t in FRAMES]
    want = cpu(mels)
    for _ in range(2):  # the first call captures, the second replays
        got = gpu([m.cuda() for m in mels])
    for g, w in zip(got, want):
        assert_close(g.float().cpu(), w, rel=rel)

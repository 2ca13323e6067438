"""The thinker stage's LM on Qwen3-ASR's dense Qwen3 decoder (1-D RoPE, q/k norm, tied head, SwiGLU): logits equal
transformers' on packed prefill and paged decode, greedy tokens equal; the original layout loads the same model."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runtime.checkpoint.asr.demo import write_original_layout
from services.thinker.model import ThinkerConfig, ThinkerLM
from tests.parity.thinker.thinker_paged_runner import PagedRunner

# The tied head multiplies by unit-scale embeddings, so logits run to ~10: fp32 rounding reaches ~2e-5 there.
TOL = dict(rtol=1e-4, atol=1e-4)
PROMPTS = ([151644, 872, 198, 9707, 11, 1879, 0, 151645, 198, 151644, 77091, 198],
           [151644, 8948, 198, 1986, 374, 264, 1273, 13, 151645, 198, 151644, 872, 198, 40, 1079, 151645, 198],
           [151644, 77091, 198, 11528, 6364, 151704])
STEPS = 6


@pytest.fixture(scope="module")
def asr_lm(asr_ckpt: Path) -> ThinkerLM:
    return ThinkerLM.load(asr_ckpt, dtype=torch.float32, use_kernels=False)


def reference(hf_asr, prompt: list[int]) -> tuple[torch.Tensor, list[int], list[torch.Tensor]]:
    """Prefill logits, greedy tokens and each step's logits from transformers' decoder with its own KV cache."""
    with torch.inference_mode():
        ids = torch.tensor([prompt])
        out = hf_asr.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=STEPS, do_sample=False,
                              output_logits=True, return_dict_in_generate=True, eos_token_id=None)
        prefill = hf_asr(input_ids=torch.tensor([prompt])).logits[0].float()
    return prefill, out.sequences[0, len(prompt):].tolist(), [lg[0].float() for lg in out.logits]


def test_config_is_dense_one_axis_and_tied(asr_ckpt: Path) -> None:
    cfg = ThinkerConfig.from_checkpoint(asr_ckpt)
    assert (cfg.num_experts, cfg.num_deepstack, cfg.mrope_section) == (0, 0, (8, 0, 0))
    assert cfg.tie_word_embeddings and cfg.audio_token_id == 151676 and not cfg.is_moe_layer(0)


def test_head_is_the_embedding(asr_lm: ThinkerLM) -> None:
    assert asr_lm.lm_head.weight.data_ptr() == asr_lm.embed_tokens.weight.data_ptr()


def test_packed_prefill_and_paged_greedy_decode_match_transformers(asr_lm: ThinkerLM, hf_asr) -> None:
    runs = [reference(hf_asr, p) for p in PROMPTS]
    runner = PagedRunner(asr_lm, seed=5)
    results = runner.step([runner.text_feed(seq, p) for seq, p in enumerate(PROMPTS)])
    ours = [[int(r.logits[-1].argmax())] for r in results]
    for (prefill, _, _), result in zip(runs, results):
        torch.testing.assert_close(result.logits, prefill, **TOL)
    for step in range(1, STEPS):
        feeds = [runner.text_feed(seq, [tokens[-1]]) for seq, tokens in enumerate(ours)]
        for seq, result in enumerate(runner.step(feeds)):
            torch.testing.assert_close(result.logits[0], runs[seq][2][step], **TOL)
            ours[seq].append(int(result.logits[0].argmax()))
    assert ours == [tokens for _, tokens, _ in runs]


def test_original_layout_loads_the_same_weights(tmp_path: Path, asr_ckpt: Path, asr_lm: ThinkerLM) -> None:
    original = ThinkerLM.load(write_original_layout(asr_ckpt, tmp_path / "orig"), use_kernels=False)
    assert original.cfg == asr_lm.cfg
    for (name, ours), (_, theirs) in zip(asr_lm.state_dict().items(), original.state_dict().items()):
        assert torch.equal(ours, theirs), name


def test_kernel_path_on_cpu_matches_reference_path(asr_ckpt: Path, asr_lm: ThinkerLM) -> None:
    """The GPU path's structure (fused q/k/v, fused residual norms, the dense MLP after them), its kernels falling
    back to their references off CUDA."""
    from tests.parity.thinker.thinker_forced import forced_steps

    fused = ThinkerLM.load(asr_ckpt, dtype=torch.float32, use_kernels=True)
    assert fused.use_kernels
    prompts = [list(p) for p in PROMPTS]
    want = forced_steps(asr_lm, prompts, None, 4)
    got = forced_steps(fused, prompts, want.greedy, 4)
    for g, w in zip(got.logits, want.logits):
        torch.testing.assert_close(g, w, **TOL)
    assert got.greedy == want.greedy

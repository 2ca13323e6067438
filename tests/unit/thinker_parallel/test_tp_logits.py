"""TP2 over gloo (this process is rank 0, one spawned worker) against the single-rank ThinkerLM on the Omni demo
checkpoint (MoE): prefill of two sequences with deepstack rows (and the hidden states the talker reads), then a
decode step on the paged KV shards. Also on a variant with one KV head, which both ranks then hold (fewer KV heads
than ranks), and on the Qwen3-ASR demo (dense MLP, LM head tied to the embedding, no deepstack)."""
from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from runtime.attention import allocate_kv_cache, build_attention_context
from services.thinker.model import DeepstackInput, ThinkerLM
from services.thinker.parallel.launch import load_parallel_thinker
from services.thinker.parallel.messages import Prepare
from services.thinker.parallel.sharded_lm import ShardedThinkerLM

BLOCK = 8
NUM_BLOCKS = 8
TABLES = [[0, 1], [2]]


def _one_kv_head(demo_ckpt: Path, out: Path) -> Path:
    """The demo checkpoint with its thinker cut to one KV head (every query head reads head 0's k/v rows)."""
    shutil.copytree(demo_ckpt, out)
    config = json.loads((out / "config.json").read_text())
    text = config["thinker_config"]["text_config"]
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    text["num_key_value_heads"] = 1
    (out / "config.json").write_text(json.dumps(config))
    tensors = load_file(out / "model.safetensors")
    for name in [n for n in tensors if n.startswith("thinker.") and n.endswith(("k_proj.weight", "v_proj.weight"))]:
        tensors[name] = tensors[name][:head_dim].contiguous()
    save_file(tensors, str(out / "model.safetensors"))
    return out


@pytest.fixture(scope="module", params=["demo", "one_kv_head", "asr"])
def ckpt(request: pytest.FixtureRequest, demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if request.param == "demo":
        return demo_ckpt
    if request.param == "asr":
        return request.getfixturevalue("asr_ckpt")
    return _one_kv_head(demo_ckpt, tmp_path_factory.mktemp("one_kv") / "ckpt")


@pytest.fixture(scope="module")
def tp2(ckpt: Path) -> Iterator[ShardedThinkerLM]:
    model = load_parallel_thinker(ckpt, 2, torch.device("cpu"), torch.float32, cpu_threads=1, timeout_s=30)
    try:
        yield model
    finally:
        model.driver.close()


def _steps(model: ThinkerLM, kv: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """Logits of a prefill (7 and 3 tokens, deepstack on two rows) and of the next decode step, and the prefill's
    hidden states at the talker's layer when the model has one."""
    gen = torch.Generator().manual_seed(seed)
    cfg = model.cfg
    ids = torch.randint(0, cfg.vocab_size, (10,), generator=gen)
    positions = torch.cat([torch.arange(7), torch.arange(3)]).expand(3, -1).contiguous()
    ctx = build_attention_context([7, 3], [7, 3], TABLES, BLOCK)
    deepstack = DeepstackInput(torch.tensor([2, 8]), [torch.randn(2, cfg.hidden_size, generator=gen)
                                                      for _ in range(cfg.num_deepstack)])
    out = model(model.embed(ids), positions, ctx, kv, deepstack=deepstack, capture_layer=cfg.accept_hidden_layer)
    prefill = out.hidden
    ids = torch.randint(0, cfg.vocab_size, (2,), generator=gen)
    ctx = build_attention_context([1, 1], [8, 4], TABLES, BLOCK)
    decode = model(model.embed(ids), torch.tensor([7, 3]).expand(3, -1).contiguous(), ctx, kv).hidden
    captured = [out.captured] if out.captured is not None else []
    return [model.compute_logits(prefill), model.compute_logits(decode), *captured]


@torch.inference_mode()
def test_tp2_logits_equal_single_rank(ckpt: Path, tp2: ShardedThinkerLM) -> None:
    single = ThinkerLM.load(ckpt)
    cfg = single.cfg
    assert (tp2.cfg.num_heads, tp2.cfg.num_kv_heads) == (cfg.num_heads // 2, max(1, cfg.num_kv_heads // 2))
    assert tp2.cfg.moe_intermediate_size == cfg.moe_intermediate_size // 2
    kv_single = allocate_kv_cache(cfg.num_layers, NUM_BLOCKS, BLOCK, cfg.num_kv_heads, cfg.head_dim,
                                  torch.float32, "cpu")
    tp2.driver.send(Prepare(NUM_BLOCKS, BLOCK, None))
    kv_tp = allocate_kv_cache(cfg.num_layers, NUM_BLOCKS, BLOCK, tp2.cfg.num_kv_heads, cfg.head_dim,
                              torch.float32, "cpu")
    expected = _steps(single, kv_single, seed=3)
    got = _steps(tp2, kv_tp, seed=3)
    assert len(got) == len(expected) == (3 if cfg.accept_hidden_layer else 2)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)  # fp32, sums in another order
    assert [t.argmax(-1).tolist() for t in got[:2]] == [t.argmax(-1).tolist() for t in expected[:2]]
    # rank 0 holds half of each expert and of the attention heads' KV, not a copy of the whole decoder
    moe = tp2.layers[0].mlp
    if cfg.num_experts:
        assert moe.gate_up_proj.shape[1] == cfg.moe_intermediate_size
    else:
        assert moe.gate_proj.weight.shape[0] == cfg.intermediate_size // 2
    assert kv_tp[0].shape[3] == 1
    assert tp2.layers[0].self_attn.q_proj.weight.shape[0] == cfg.num_heads // 2 * cfg.head_dim

"""Each rank reads exactly its slices of the checkpoint (per-expert or already fused expert tensors alike, attention
biases with their rows), only rank 0 reads the embedding and the LM head, and only rank 0 adds o_proj's bias."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from runtime.checkpoint.family import read_family
from services.thinker.model.checkpoint import load_thinker_state_dict
from services.thinker.model.config import ThinkerConfig
from services.thinker.parallel.plan import plan_rank
from services.thinker.parallel.shard_load import load_rank_state_dict


@pytest.fixture(scope="module")
def full(demo_ckpt: Path) -> dict[str, torch.Tensor]:
    return load_thinker_state_dict(demo_ckpt, ThinkerConfig.from_checkpoint(demo_ckpt), "cpu", torch.float32)


def _expected(full: dict[str, torch.Tensor], cfg: ThinkerConfig, rank: int) -> dict[str, torch.Tensor]:
    """The rank's tensors cut from the whole state dict by hand."""
    plan = plan_rank(cfg, rank, 2)
    q, kv, e = plan.q_rows, plan.kv_rows, plan.expert_cols
    width = cfg.moe_intermediate_size
    out = {}
    for name, t in full.items():
        if name.endswith("q_proj.weight"):
            t = t[q.start:q.stop]
        elif name.endswith(("k_proj.weight", "v_proj.weight")):
            t = t[kv.start:kv.stop]
        elif name.endswith("o_proj.weight"):
            t = t[:, q.start:q.stop]
        elif name.endswith("mlp.gate_up_proj"):
            t = torch.cat((t[:, e.start:e.stop], t[:, width + e.start:width + e.stop]), dim=1)
        elif name.endswith("mlp.down_proj"):
            t = t[:, :, e.start:e.stop]
        elif name in ("embed_tokens.weight", "lm_head.weight") and rank:
            continue
        out[name] = t
    return out


def _assert_equal(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(expected)
    for name, t in expected.items():
        assert torch.equal(got[name], t), name


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_reads_its_slices_of_per_expert_tensors(demo_ckpt: Path, full: dict[str, torch.Tensor],
                                                       rank: int) -> None:
    cfg = ThinkerConfig.from_checkpoint(demo_ckpt)
    got = load_rank_state_dict(demo_ckpt, plan_rank(cfg, rank, 2), "cpu", torch.float32)
    _assert_equal(got, _expected(full, cfg, rank))
    assert got["layers.0.mlp.gate_up_proj"].shape == (cfg.num_experts, cfg.moe_intermediate_size, cfg.hidden_size)


def test_a_rank_reads_its_slices_of_fused_expert_tensors(demo_ckpt: Path, full: dict[str, torch.Tensor],
                                                         tmp_path: Path) -> None:
    """A checkpoint that stores experts fused ([E, 2I, H] gate then up rows, [E, H, I]) gives the same shard."""
    family = read_family(demo_ckpt)
    shutil.copy(demo_ckpt / "config.json", tmp_path / "config.json")
    tensors = {f"{family.lm_prefix}{n.replace('mlp.', 'mlp.experts.', 1) if 'proj' in n and 'mlp' in n else n}": t
               for n, t in full.items() if n != "lm_head.weight"}
    tensors[f"{family.head_prefix}weight"] = full["lm_head.weight"]
    save_file({n: t.contiguous() for n, t in tensors.items()}, str(tmp_path / "model.safetensors"))
    cfg = ThinkerConfig.from_checkpoint(tmp_path)
    _assert_equal(load_rank_state_dict(tmp_path, plan_rank(cfg, 1, 2), "cpu", torch.float32),
                  _expected(full, cfg, 1))


def test_attention_biases_are_sliced_and_o_proj_s_is_added_by_rank_0_only(demo_ckpt: Path, tmp_path: Path) -> None:
    family = read_family(demo_ckpt)
    config = json.loads((demo_ckpt / "config.json").read_text())
    config["thinker_config"]["text_config"]["attention_bias"] = True
    (tmp_path / "config.json").write_text(json.dumps(config))
    tensors = load_file(demo_ckpt / "model.safetensors")
    for name in [n for n in tensors if n.startswith(family.lm_prefix) and n.endswith("_proj.weight")
                 and ".self_attn." in n]:
        tensors[name.replace(".weight", ".bias")] = torch.randn(tensors[name].shape[0])
    save_file(tensors, str(tmp_path / "model.safetensors"))
    cfg = ThinkerConfig.from_checkpoint(tmp_path)
    full = load_thinker_state_dict(tmp_path, cfg, "cpu", torch.float32)
    shards = [load_rank_state_dict(tmp_path, plan_rank(cfg, r, 2), "cpu", torch.float32) for r in range(2)]
    attn = "layers.1.self_attn."
    assert torch.equal(torch.cat([s[attn + "q_proj.bias"] for s in shards]), full[attn + "q_proj.bias"])
    assert torch.equal(torch.cat([s[attn + "v_proj.bias"] for s in shards]), full[attn + "v_proj.bias"])
    assert torch.equal(shards[0][attn + "o_proj.bias"], full[attn + "o_proj.bias"])
    assert not shards[1][attn + "o_proj.bias"].any()

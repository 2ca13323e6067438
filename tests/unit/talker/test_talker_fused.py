"""Fused weights of the fast talker step: each module's weight stays a view of its rows; padding rows are zeros."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from services.talker.model.fused import ROW_MULTIPLE, fuse_linears, talker_weights
from services.talker.model.load import TalkerModel
from tests.unit.talker.talker_tiny import tiny_talker


def test_fused_rows_pad_to_the_multiple_and_the_linears_read_their_rows() -> None:
    torch.manual_seed(0)
    linears = [nn.Linear(6, 5, bias=False), nn.Linear(6, 5, bias=False), nn.Linear(6, 1, bias=False)]
    before = [m.weight.detach().clone() for m in linears]
    fused = fuse_linears(linears, ROW_MULTIPLE)
    assert fused.shape == (16, 6)  # 11 rows, then 5 zero rows up to a multiple of 8
    assert torch.equal(fused[:11], torch.cat(before)) and not fused[11:].any()
    for m, w in zip(linears, before):
        assert torch.equal(m.weight, w) and m.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    assert fuse_linears(linears).shape == (11, 6)  # no multiple: no padding


def test_shared_expert_gemm_gives_gate_up_and_the_gate_logit() -> None:
    model: TalkerModel = tiny_talker()
    layer = talker_weights(model.lm)[0]
    moe = model.lm.layers[0].mlp
    x = torch.randn(3, model.cfg.lm.hidden_size)
    out = F.linear(x, layer.shared.gate_up_gate)
    width = 2 * layer.shared.intermediate
    assert out.shape[1] % ROW_MULTIPLE == 0
    torch.testing.assert_close(out[:, : width // 2], moe.shared_expert.gate_proj(x))
    torch.testing.assert_close(out[:, width // 2 : width], moe.shared_expert.up_proj(x))
    torch.testing.assert_close(out[:, width : width + 1], moe.shared_expert_gate(x))

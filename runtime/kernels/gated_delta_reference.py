"""The gated delta rule (Gated DeltaNet's token mixer) in plain PyTorch, fp32: the CPU path and the reference the GPU
kernels are tested against.

Per value head, with a state S [Dk, Dv], log-decay g_t <= 0 and write strength beta_t in (0, 1):

    S_t = exp(g_t) * S_{t-1} + k_t u_t^T,   u_t = beta_t * (v_t - exp(g_t) * S_{t-1}^T k_t),   o_t = S_t^T q_t

q and k are L2-normalised first and q is scaled by Dk^-0.5. Each key head serves num_v_heads / num_k_heads
consecutive value heads.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

CHUNK = 64  # tokens solved together in the chunked form; any size gives the same result up to rounding


class DeltaOut(NamedTuple):
    out: torch.Tensor  # [n, Hv, Dv] (or [B, Hv, Dv] for a step), in q's dtype
    state: torch.Tensor  # fp32 state after the last token


def prepare_qk(q: torch.Tensor, k: torch.Tensor, num_v_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32, L2-normalised over the head dim (eps 1e-6 inside the root, as fla does), q scaled, key heads repeated
    to the value heads: [..., Hk, Dk] -> [..., Hv, Dk] each."""
    q, k = q.float(), k.float()
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) * q.shape[-1] ** -0.5
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    repeat = num_v_heads // q.shape[-2]
    return q.repeat_interleave(repeat, dim=-2), k.repeat_interleave(repeat, dim=-2)


def chunk_gated_delta_rule(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state: torch.Tensor,
    chunk: int = CHUNK,
) -> DeltaOut:
    """One sequence's tokens from `state`. q, k: [n, Hk, Dk]; v: [n, Hv, Dv]; g, beta: [n, Hv]; state
    [Hv, Dk, Dv] fp32 (not modified).

    Within a chunk, with G_i the cumulative log-decay from the chunk start and S the state there, the writes u solve
    the unit lower-triangular system (I + A) u = beta * (v - exp(G) * S^T k), A_ij = beta_i exp(G_i - G_j) k_i.k_j
    for j < i, so a chunk costs a few matmuls and one triangular solve instead of a token loop.
    """
    dtype, num_v_heads = v.dtype, v.shape[1]
    q, k = prepare_qk(q, k, num_v_heads)
    # heads first: [Hv, n, D] and [Hv, n]
    q, k, v = (t.transpose(0, 1) for t in (q, k, v.float()))
    g, beta = g.float().transpose(0, 1), beta.float().transpose(0, 1)
    s = state.float()
    outs = []
    for start in range(0, q.shape[1], chunk):
        stop = min(start + chunk, q.shape[1])
        qc, kc, vc = q[:, start:stop], k[:, start:stop], v[:, start:stop]  # [Hv, c, D]
        cum = g[:, start:stop].cumsum(-1)  # [Hv, c], G_i
        bc = beta[:, start:stop, None]  # [Hv, c, 1]
        causal = torch.ones(stop - start, stop - start, dtype=torch.bool, device=q.device).tril()
        # decay[i, j] = exp(G_i - G_j) on and below the diagonal, 0 above (masked before exp: no overflow)
        decay = (cum[:, :, None] - cum[:, None, :]).masked_fill(~causal, float("-inf")).exp()  # [Hv, c, c]
        system = (bc * (kc @ kc.transpose(1, 2)) * decay).tril(-1)  # A
        system = system + torch.eye(stop - start, device=q.device)
        rhs = bc * (vc - cum.exp()[..., None] * (kc @ s))  # [Hv, c, Dv]
        u = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)  # [Hv, c, Dv]
        outs.append(cum.exp()[..., None] * (qc @ s) + ((qc @ kc.transpose(1, 2)) * decay) @ u)
        last = cum[:, -1:]  # [Hv, 1]
        s = last.exp()[..., None] * s + (kc * (last - cum).exp()[..., None]).transpose(1, 2) @ u
    out = torch.cat(outs, dim=1).transpose(0, 1)  # [n, Hv, Dv]
    return DeltaOut(out.to(dtype), s)


def recurrent_gated_delta_step(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state: torch.Tensor
) -> DeltaOut:
    """One token of each of B sequences. q, k: [B, Hk, Dk]; v: [B, Hv, Dv]; g, beta: [B, Hv]; state
    [B, Hv, Dk, Dv] fp32 (not modified)."""
    dtype = v.dtype
    q, k = prepare_qk(q, k, v.shape[1])
    s = state.float() * g.float().exp()[..., None, None]  # [B, Hv, Dk, Dv]
    predicted = torch.einsum("bhkv,bhk->bhv", s, k)
    u = beta.float()[..., None] * (v.float() - predicted)  # [B, Hv, Dv]
    s = s + k[..., :, None] * u[..., None, :]
    return DeltaOut(torch.einsum("bhkv,bhk->bhv", s, q).to(dtype), s)

"""HBM roofline of a Thinker decode step: the bytes it must read over the measured device copy bandwidth."""
from __future__ import annotations

import time

import torch

from bench.moe_routing import uniform_experts
from services.thinker.model import ThinkerConfig


def decode_step_bytes(cfg: ThinkerConfig, rows: int, kv_tokens: int, elem: int = 2) -> dict[str, float]:
    """Bytes one decode step of `rows` rows must read: attention weights, router, the experts touched, final norm
    and lm_head, the rows' embeddings, and every cached K/V of the batch (`kv_tokens` over all rows)."""
    h, d = cfg.hidden_size, cfg.head_dim
    attn = h * (cfg.num_heads + 2 * cfg.num_kv_heads) * d + cfg.num_heads * d * h
    expert = 3 * cfg.moe_intermediate_size * h
    experts = uniform_experts(cfg.num_experts, cfg.num_experts_per_tok, rows) * expert
    per_layer = (attn + cfg.num_experts * h + experts + 2 * h) * elem
    kv = kv_tokens * cfg.num_layers * 2 * cfg.num_kv_heads * d * elem
    head = (cfg.vocab_size * h + rows * h + h) * elem
    total = cfg.num_layers * per_layer + kv + head
    return {"total": total, "weights": total - kv, "kv": kv,
            "experts_per_layer": uniform_experts(cfg.num_experts, cfg.num_experts_per_tok, rows)}


def model_step_bytes(model: torch.nn.Module, rows: int, kv_tokens: int) -> dict[str, float]:
    """decode_step_bytes counted from a built model's own tensors, for any decoder the thinker serves (Qwen3.5's
    hybrid included): every weight once except the embedding table (only the rows' embeddings) and the experts (the
    expected distinct experts of uniform routing), the K/V of the layers that keep it, and a hybrid model's state
    slots read and written once per row."""
    cfg = model.cfg
    touched = uniform_experts(cfg.num_experts, cfg.num_experts_per_tok, rows) if cfg.num_experts else 0.0
    head = model.lm_head.weight  # read whole, tied to the embedding table or not
    weights = float(head.numel() * head.element_size())
    for name, t in model.named_parameters(remove_duplicate=False):
        nbytes = t.numel() * t.element_size()
        if name.startswith("lm_head."):
            continue
        if name.startswith("embed_tokens."):
            weights += rows * nbytes / t.shape[0]
        elif name.endswith(("mlp.gate_up_proj", "mlp.down_proj")) and cfg.num_experts:
            weights += nbytes * touched / cfg.num_experts
        else:
            weights += nbytes
    elem = model.lm_head.weight.element_size()
    kv = kv_tokens * len(cfg.kv_layers) * 2 * cfg.num_kv_heads * cfg.head_dim * elem
    state = 0.0
    if cfg.hybrid is not None:
        from services.thinker.model.linear_state import LinearStateCache

        state = 2 * rows * LinearStateCache.bytes_per_slot(cfg.hybrid, model.lm_head.weight.dtype)
    return {"total": weights + kv + state, "weights": weights, "kv": kv, "state": state,
            "experts_per_layer": touched}


def copy_bandwidth(device: torch.device, nbytes: int = 2 << 30, iters: int = 10) -> float:
    """Device-to-device copy in bytes/s, counting bytes read plus written (METHOD.md's ceiling)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dst.copy_(src)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3
    else:
        t0 = time.perf_counter()
        for _ in range(iters):
            dst.copy_(src)
        seconds = time.perf_counter() - t0
    del src, dst
    return 2 * nbytes * iters / seconds

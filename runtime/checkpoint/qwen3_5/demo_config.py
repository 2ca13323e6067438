"""The Qwen3.5 demo checkpoint's `config.json` (dense `qwen3_5` or MoE `qwen3_5_moe`): the real layer pattern, gated
attention with partial interleaved M-RoPE, Gated-DeltaNet head ratios and a ViT without deepstack, at tiny widths.

Token ids are the demo tokenizer's (Qwen2's BPE with the Qwen specials from 151643, shared with the Omni demo), not
Qwen3.5's 248k vocabulary: every id is read from this config, so serving code cannot tell the difference.
"""
from __future__ import annotations

from typing import Any

from runtime.checkpoint import token_ids as ids

TEXT_HIDDEN = 64
# head_dim 64 with partial_rotary_factor 0.25 rotates 16 dims = 8 frequency pairs, split T/H/W as [3, 3, 2]
# (the released [11, 11, 10] over 32 pairs, scaled down); interleaved as in the release.
HEAD_DIM = 64
MROPE_SECTION = [3, 3, 2]
NUM_LAYERS = 8  # [linear x3, full] x2: the release's full_attention_interval 4
FULL_ATTENTION_INTERVAL = 4


def layer_types(num_layers: int = NUM_LAYERS, interval: int = FULL_ATTENTION_INTERVAL) -> list[str]:
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(num_layers)]


def text_config(moe: bool) -> dict[str, Any]:
    """Dense or MoE hybrid decoder. Gated DeltaNet: 2 key heads repeated to 4 value heads (the release's 16 -> 32)."""
    fields: dict[str, Any] = {
        "model_type": "qwen3_5_moe_text" if moe else "qwen3_5_text",
        "vocab_size": ids.THINKER_VOCAB_SIZE,
        "hidden_size": TEXT_HIDDEN,
        "num_hidden_layers": NUM_LAYERS,
        "layer_types": layer_types(),
        "full_attention_interval": FULL_ATTENTION_INTERVAL,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HEAD_DIM,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "hidden_act": "silu",
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "eos_token_id": ids.IM_END,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                            "mrope_section": list(MROPE_SECTION), "mrope_interleaved": True},
    }
    if moe:  # every layer MoE: 8 experts top-2 (softmax, renormalised) plus the sigmoid-gated shared expert
        fields.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=32)
    else:
        fields["intermediate_size"] = 128
    return fields


def vision_config(moe: bool) -> dict[str, Any]:
    """The Qwen3-VL ViT with no deepstack: 16 px patches, 2-frame temporal patches, 2x2 merge."""
    return {
        "model_type": "qwen3_5_moe_vision" if moe else "qwen3_5_vision",
        "depth": 2,
        "hidden_size": 32,
        "hidden_act": "gelu_pytorch_tanh",
        "intermediate_size": 64,
        "num_heads": 2,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": TEXT_HIDDEN,
        "num_position_embeddings": 64,
    }


def demo_config(moe: bool = False) -> dict[str, Any]:
    """The whole `config.json` (a fresh dict each call)."""
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5_moe" if moe else "qwen3_5",
        "image_token_id": ids.IMAGE_PAD,
        "video_token_id": ids.VIDEO_PAD,
        "vision_start_token_id": ids.VISION_START,
        "vision_end_token_id": ids.VISION_END,
        "tie_word_embeddings": False,
        "text_config": text_config(moe),
        "vision_config": vision_config(moe),
    }


def generation_config() -> dict[str, Any]:
    return {"bos_token_id": ids.ENDOFTEXT, "eos_token_id": [ids.IM_END, ids.ENDOFTEXT], "pad_token_id": ids.ENDOFTEXT}

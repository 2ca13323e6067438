"""The decoder LMs of the families the thinker serves besides Qwen3-Omni, at their released dims
(docs/model-dims.md): the `config.json` root our loaders read, the transformers class
and text config of the same model, and the demo checkpoint whose tokenizer and template make the workload's prompts.

Only the decoder and head are built (random weights); `tiny` keeps the demo checkpoint's decoder dims (a CPU smoke
run). Vocabularies are the released ones; prompts come from the demo tokenizer (ids below its 151,669), which the
model cannot tell from any other ids."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.asr.checkpoint import real_config as asr_real_config
from runtime.checkpoint.asr.demo_config import demo_config as asr_demo_config
from runtime.checkpoint.qwen3_5.demo_config import layer_types
from runtime.checkpoint.qwen3_5.demo_config import demo_config as qwen3_5_demo_config
from runtime.model_path import DEMO_ASR, DEMO_QWEN3_5, DEMO_QWEN3_5_MOE


@dataclass(frozen=True)
class LMFamily:
    name: str
    root: dict[str, Any]  # config.json as our ThinkerConfig.from_dict reads it
    hf_class: str  # transformers' causal-LM class of the decoder alone
    hf_config_class: str
    text_config: dict[str, Any]  # the decoder's config (also inside root)
    demo_model: str  # tokenizer and chat template of the prompts

    @property
    def is_moe(self) -> bool:
        return self.text_config.get("num_experts", 0) > 0


def _qwen3_5_text(moe: bool) -> dict[str, Any]:
    text = {
        "vocab_size": 248320, "num_attention_heads": 16, "head_dim": 256, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "tie_word_embeddings": False, "attention_bias": False, "full_attention_interval": 4,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True},
    }  # fmt: skip
    if moe:  # 35B-A3B: 40 layers (30 GDN + 10 attention), 256 experts top-8 plus the gated shared expert
        text.update(model_type="qwen3_5_moe_text", hidden_size=2048, num_hidden_layers=40, num_key_value_heads=2,
                    num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
                    shared_expert_intermediate_size=512, layer_types=layer_types(40))
    else:  # 9B: 32 layers (24 GDN + 8 attention)
        text.update(model_type="qwen3_5_text", hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
                    num_key_value_heads=4, layer_types=layer_types(32))
    return text


# The Qwen3-VL ViT Qwen3.5 ships (docs/model-dims.md), without deepstack; its output is the LM's width.
QWEN3_5_VISION = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                  "num_position_embeddings": 2304}


def _qwen3_5(moe: bool, tiny: bool) -> LMFamily:
    root = qwen3_5_demo_config(moe)
    text = root["text_config"] if tiny else {**root["text_config"], **_qwen3_5_text(moe)}
    root["text_config"] = text
    if not tiny:
        root["vision_config"].update(QWEN3_5_VISION)
    root["vision_config"]["out_hidden_size"] = text["hidden_size"]
    prefix = "Qwen3_5Moe" if moe else "Qwen3_5"
    return LMFamily("qwen3.5-35b-a3b" if moe else "qwen3.5-9b", root, f"{prefix}ForCausalLM",
                    f"{prefix}TextConfig", text, DEMO_QWEN3_5_MOE if moe else DEMO_QWEN3_5)


def _asr(tiny: bool) -> LMFamily:
    """Qwen3-ASR's decoder: the demo config, or its release widths as the Transcribe benchmark's checkpoint has them."""
    root = asr_demo_config() if tiny else asr_real_config()
    return LMFamily("qwen3-asr-1.7b", root, "Qwen3ForCausalLM", "Qwen3Config", root["text_config"], DEMO_ASR)


# name -> (tiny: the demo checkpoint's decoder dims instead, for a CPU smoke run) -> LMFamily
FAMILIES = {"qwen3.5-9b": lambda tiny: _qwen3_5(False, tiny), "qwen3.5-35b-a3b": lambda tiny: _qwen3_5(True, tiny),
            "qwen3-asr-1.7b": _asr}

"""The demo checkpoint's `config.json`: the real Qwen3-Omni layout and token ids with tiny widths."""
from __future__ import annotations

from typing import Any

from runtime.checkpoint import token_ids as ids

# Thinker LM widths; other engineers hard-code these in tests, so they are part of the contract.
THINKER_HIDDEN = 64
THINKER_HEAD_DIM = 16
TALKER_HIDDEN = 32
ACCEPT_HIDDEN_LAYER = 2


def _rope(theta: float, mrope_section: list[int] | None) -> dict[str, Any]:
    """Rope fields in the form the released checkpoint writes them (legacy `rope_scaling` + `rope_theta`)."""
    fields: dict[str, Any] = {"rope_theta": theta}
    if mrope_section is not None:
        fields["rope_scaling"] = {
            "rope_type": "default",
            "mrope_section": mrope_section,
            "interleaved": True,
            "mrope_interleaved": True,
        }
    return fields


def _multimodal_ids() -> dict[str, Any]:
    """Media token ids that both the thinker and the talker configs carry."""
    return {
        "audio_token_id": ids.AUDIO_PAD,
        "image_token_id": ids.IMAGE_PAD,
        "video_token_id": ids.VIDEO_PAD,
        "vision_start_token_id": ids.VISION_START,
        "audio_start_token_id": ids.AUDIO_START,
        "position_id_per_seconds": ids.POSITION_ID_PER_SECONDS,
    }


def audio_config() -> dict[str, Any]:
    """AuT encoder: n_window 50 / n_window_infer 800 keep the real 104-token attention window."""
    return {
        "num_mel_bins": 128,
        "encoder_layers": 2,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "d_model": 32,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_function": "gelu",
        "activation_dropout": 0.0,
        "scale_embedding": False,
        "max_source_positions": 1500,
        "n_window": 50,
        "n_window_infer": 800,
        "conv_chunksize": 500,
        "downsample_hidden_size": 8,
        "output_dim": THINKER_HIDDEN,
    }


def vision_config() -> dict[str, Any]:
    """Vision tower: 16 px patches, 2-frame temporal patches, 2x2 merge, deepstack after blocks 0, 1, 2."""
    return {
        "depth": 4,
        "hidden_size": 32,
        "hidden_act": "gelu_pytorch_tanh",
        "intermediate_size": 64,
        "num_heads": 2,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": THINKER_HIDDEN,
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [0, 1, 2],
    }


def thinker_text_config() -> dict[str, Any]:
    """Thinker MoE LM: every layer MoE, 8 experts top-2, interleaved M-RoPE [4, 2, 2] over head_dim 16."""
    return {
        "vocab_size": ids.THINKER_VOCAB_SIZE,
        "hidden_size": THINKER_HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": THINKER_HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "moe_intermediate_size": 32,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "tie_word_embeddings": False,
        **_rope(1e6, [4, 2, 2]),
    }


def thinker_config() -> dict[str, Any]:
    return {
        **_multimodal_ids(),
        "audio_end_token_id": ids.AUDIO_END,
        "vision_end_token_id": ids.VISION_END,
        "user_token_id": ids.USER,
        "seconds_per_chunk": 2,
        "tie_word_embeddings": False,
        "audio_config": audio_config(),
        "vision_config": vision_config(),
        "text_config": thinker_text_config(),
    }


def talker_config() -> dict[str, Any]:
    """Talker MoE (with shared expert) and its code predictor, with the real codec ids and speakers."""
    return {
        **_multimodal_ids(),
        "audio_end_token_id": ids.AUDIO_END,
        "spatial_merge_size": 2,
        "accept_hidden_layer": ACCEPT_HIDDEN_LAYER,
        "num_code_groups": ids.NUM_CODE_GROUPS,
        "thinker_hidden_size": THINKER_HIDDEN,
        "codec_pad_id": ids.CODEC_PAD,
        "codec_bos_id": ids.CODEC_BOS,
        "codec_eos_token_id": ids.CODEC_EOS,
        "codec_nothink_id": ids.CODEC_NOTHINK,
        "codec_think_bos_id": ids.CODEC_THINK_BOS,
        "codec_think_eos_id": ids.CODEC_THINK_EOS,
        "speaker_id": dict(ids.SPEAKER_IDS),
        "text_config": {
            "vocab_size": ids.TALKER_VOCAB_SIZE,
            "hidden_size": TALKER_HIDDEN,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "hidden_act": "silu",
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6,
            "attention_bias": False,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "norm_topk_prob": True,
            **_rope(1e6, [4, 2, 2]),
        },
        "code_predictor_config": {
            "vocab_size": ids.CODEBOOK_SIZE,
            "hidden_size": TALKER_HIDDEN,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "hidden_act": "silu",
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6,
            "attention_bias": False,
            "num_code_groups": ids.NUM_CODE_GROUPS,
            **_rope(1e6, None),
        },
    }


def code2wav_config() -> dict[str, Any]:
    """Code2Wav: real window 72, 16 quantizers and upsampling (1920 samples per frame), tiny widths."""
    return {
        "codebook_size": ids.CODEBOOK_SIZE,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "attention_bias": False,
        "sliding_window": 72,
        "hidden_act": "silu",
        "layer_scale_initial_scale": 0.01,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 8000,
        "num_quantizers": ids.NUM_CODE_GROUPS,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
        "decoder_dim": 32,
        **_rope(1e4, None),
    }


def demo_config() -> dict[str, Any]:
    """The whole `config.json` of the demo checkpoint (a fresh dict each call)."""
    return {
        "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
        "model_type": "qwen3_omni_moe",
        "enable_audio_output": True,
        "im_start_token_id": ids.IM_START,
        "im_end_token_id": ids.IM_END,
        "system_token_id": ids.SYSTEM,
        "user_token_id": ids.USER,
        "assistant_token_id": ids.ASSISTANT,
        "tts_pad_token_id": ids.TTS_PAD,
        "tts_bos_token_id": ids.TTS_BOS,
        "tts_eos_token_id": ids.TTS_EOS,
        "thinker_config": thinker_config(),
        "talker_config": talker_config(),
        "code2wav_config": code2wav_config(),
    }

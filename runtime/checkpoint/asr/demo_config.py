"""The Qwen3-ASR demo checkpoint's `config.json` (the `-hf` layout) and `preprocessor_config.json`: the real ids,
chunking and mel front end with tiny widths."""
from __future__ import annotations

from typing import Any

from runtime.checkpoint import token_ids as omni_ids
from runtime.checkpoint.asr import token_ids as ids

TEXT_HIDDEN = 64
TEXT_HEAD_DIM = 16


def audio_config() -> dict[str, Any]:
    """AuT encoder: n_window 50 / n_window_infer 800 keep the real 13-token chunks and 104-token windows."""
    return {
        "model_type": "qwen3_asr_encoder",
        "num_mel_bins": 128,
        "encoder_layers": 2,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "d_model": 32,
        "activation_function": "gelu",
        "n_window": 50,
        "n_window_infer": 800,
        "downsample_hidden_size": 8,
        "max_position_embeddings": 13,
        "output_dim": TEXT_HIDDEN,
    }


def text_config() -> dict[str, Any]:
    """Dense Qwen3 decoder: q/k norm, 1-D RoPE, tied embeddings, SwiGLU MLP."""
    return {
        "model_type": "qwen3",
        "vocab_size": ids.VOCAB_SIZE,
        "hidden_size": TEXT_HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": TEXT_HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": 65536,
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
    }


def demo_config() -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ASRForConditionalGeneration"],
        "model_type": "qwen3_asr",
        "audio_token_id": ids.AUDIO_PAD,
        "timestamp_token_id": ids.TIMESTAMP,
        "pad_token_id": omni_ids.IM_END,
        "eos_token_id": [omni_ids.ENDOFTEXT, omni_ids.IM_END],
        "tie_word_embeddings": True,
        "audio_config": audio_config(),
        "text_config": text_config(),
    }


def generation_config() -> dict[str, Any]:
    return {"eos_token_id": [omni_ids.ENDOFTEXT, omni_ids.IM_END], "pad_token_id": omni_ids.IM_END}


def preprocessor_config() -> dict[str, Any]:
    """Qwen3-ASR's feature extractor: 128-bin log-mel at 16 kHz, hop 160, padded to whole 100-frame chunks."""
    return {
        "feature_extractor_type": "Qwen3ASRFeatureExtractor",
        "processor_class": "Qwen3ASRProcessor",
        "feature_size": 128,
        "sampling_rate": 16000,
        "hop_length": 160,
        "n_fft": 400,
        "chunk_length": 30,
        "n_window": 50,
        "padding_side": "right",
        "padding_value": 0.0,
        "dither": 0.0,
        "return_attention_mask": True,
    }

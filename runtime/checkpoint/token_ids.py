"""The real Qwen3-Omni token ids (thinker text vocab and talker codec vocab) that the demo checkpoint reuses."""
from __future__ import annotations

# Thinker text vocabulary: 151,643 byte-level BPE tokens, then the 33 specials below, rows padded to 152,064.
THINKER_VOCAB_SIZE = 152064
NUM_REGULAR_TOKENS = 151643

# The 33 special tokens in id order from 151643; the order fixes every id, so it must never change.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
)
SPECIAL_TOKEN_IDS: dict[str, int] = {tok: NUM_REGULAR_TOKENS + i for i, tok in enumerate(SPECIAL_TOKENS)}

ENDOFTEXT = SPECIAL_TOKEN_IDS["<|endoftext|>"]  # 151643
IM_START = SPECIAL_TOKEN_IDS["<|im_start|>"]  # 151644
IM_END = SPECIAL_TOKEN_IDS["<|im_end|>"]  # 151645
VISION_START = SPECIAL_TOKEN_IDS["<|vision_start|>"]  # 151652
VISION_END = SPECIAL_TOKEN_IDS["<|vision_end|>"]  # 151653
IMAGE_PAD = SPECIAL_TOKEN_IDS["<|image_pad|>"]  # 151655
VIDEO_PAD = SPECIAL_TOKEN_IDS["<|video_pad|>"]  # 151656
THINK_START = SPECIAL_TOKEN_IDS["<think>"]  # 151667
THINK_END = SPECIAL_TOKEN_IDS["</think>"]  # 151668
AUDIO_START = SPECIAL_TOKEN_IDS["<|audio_start|>"]  # 151669
AUDIO_END = SPECIAL_TOKEN_IDS["<|audio_end|>"]  # 151670
TTS_PAD = SPECIAL_TOKEN_IDS["<tts_pad>"]  # 151671
TTS_BOS = SPECIAL_TOKEN_IDS["<tts_text_bos>"]  # 151672
TTS_EOS = SPECIAL_TOKEN_IDS["<tts_text_eod>"]  # 151673
AUDIO_PAD = SPECIAL_TOKEN_IDS["<|audio_pad|>"]  # 151675

# Regular BPE tokens the chat layout relies on.
SYSTEM = 8948
USER = 872
ASSISTANT = 77091
NEWLINE = 198

# Talker codec vocabulary: 2048 codes, then 1024 control ids (generate suppresses all of them but EOS).
CODEBOOK_SIZE = 2048
TALKER_VOCAB_SIZE = 3072
NUM_CODE_GROUPS = 16
CODEC_PAD = 2148
CODEC_BOS = 2149
CODEC_EOS = 2150
CODEC_NOTHINK = 2155
CODEC_THINK_BOS = 2156
CODEC_THINK_EOS = 2157
SPEAKER_IDS: dict[str, int] = {"chelsie": 2301, "ethan": 2302, "aiden": 2303}

POSITION_ID_PER_SECONDS = 13

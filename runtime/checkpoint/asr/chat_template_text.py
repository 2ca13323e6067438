"""The Qwen3-ASR demo checkpoint's Jinja chat template (our own text): ChatML, an audio part renders as
`<|audio_start|><|audio_pad|><|audio_end|>`, and a final assistant turn can be continued (the forced-language
prefill `language English<asr_text>`), as transformers' `apply_transcription_request` asks of it."""
from __future__ import annotations

from runtime.checkpoint.chat_template_text import chatml_template

CHAT_TEMPLATE = chatml_template({"audio": "<|audio_start|><|audio_pad|><|audio_end|>"},
                                "Qwen3-ASR takes text and audio parts only, not ")

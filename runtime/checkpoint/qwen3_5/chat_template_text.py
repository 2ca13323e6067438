"""The Qwen3.5 demo checkpoint's Jinja chat template (our own text): ChatML with image and video parts, no audio.

A video renders as one `<|video_pad|>` between vision markers, as the released Qwen3.5 template writes it; the
processor (and our gateway) then replaces that one pad with a timestamped block per frame.
"""
from __future__ import annotations

from runtime.checkpoint.chat_template_text import chatml_template

CHAT_TEMPLATE = chatml_template({"image": "<|vision_start|><|image_pad|><|vision_end|>",
                                 "video": "<|vision_start|><|video_pad|><|vision_end|>"},
                                "Qwen3.5 takes text, image and video parts only, not ")

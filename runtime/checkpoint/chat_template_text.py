"""The ChatML Jinja chat template the demo checkpoint ships (our own text; same layout as Qwen3-Omni's)."""
from __future__ import annotations

# Content is a string or a list of parts {"type": "text"|"image"|"video"|"audio", ...}. Each media part becomes
# one placeholder pad between its start/end markers; the processor (or build_prompt_ids) expands the pad to the
# item's token count. Whitespace-control everywhere, so the only newlines are the ones ChatML puts after the role
# and after <|im_end|>.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- elif message['content'] is not none -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}"
    "{{- part['text'] -}}"
    "{%- elif part['type'] == 'image' -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'video' -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'audio' -%}"
    "{{- '<|audio_start|><|audio_pad|><|audio_end|>' -}}"
    "{%- else -%}"
    "{{- raise_exception('unsupported content part type: ' + part['type'] | string) -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

"""The Qwen3-ASR demo checkpoint's Jinja chat template (our own text): ChatML, an audio part renders as
`<|audio_start|><|audio_pad|><|audio_end|>`, and a final assistant turn can be continued (the forced-language
prefill `language English<asr_text>`), as transformers' `apply_transcription_request` asks of it."""
from __future__ import annotations

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- elif message['content'] is not none -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}"
    "{{- part['text'] -}}"
    "{%- elif part['type'] == 'audio' -%}"
    "{{- '<|audio_start|><|audio_pad|><|audio_end|>' -}}"
    "{%- else -%}"
    "{{- raise_exception('Qwen3-ASR takes text and audio parts only, not ' + part['type'] | string) -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

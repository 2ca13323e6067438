"""The ChatML Jinja chat template the demo checkpoint ships (our own text; same layout as Qwen3-Omni's)."""
from __future__ import annotations

# Content is a string or a list of parts {"type": "text"|"image"|"video"|"audio", ...}. Each media part becomes
# one placeholder pad between its start/end markers; the processor (or build_prompt_ids) expands the pad to the
# item's token count. Whitespace-control everywhere, so the only newlines are the ones ChatML puts after the role
# and after <|im_end|>.
def chatml_template(placeholders: dict[str, str], refusal: str) -> str:
    """ChatML over string or part-list content: each media part type in `placeholders` renders as its markers and one
    pad; any other part type raises `refusal` + its type."""
    media = "".join(f"{{%- elif part['type'] == '{kind}' -%}}{{{{- '{text}' -}}}}"
                    for kind, text in placeholders.items())
    return (
        "{%- for message in messages -%}"
        "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
        "{%- if message['content'] is string -%}"
        "{{- message['content'] -}}"
        "{%- elif message['content'] is not none -%}"
        "{%- for part in message['content'] -%}"
        "{%- if part['type'] == 'text' -%}"
        "{{- part['text'] -}}"
        + media +
        "{%- else -%}"
        f"{{{{- raise_exception('{refusal}' + part['type'] | string) -}}}}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- endif -%}"
        "{{- '<|im_end|>\\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}"
        "{{- '<|im_start|>assistant\\n' -}}"
        "{%- endif -%}"
    )


CHAT_TEMPLATE = chatml_template({"image": "<|vision_start|><|image_pad|><|vision_end|>",
                                 "video": "<|vision_start|><|video_pad|><|vision_end|>",
                                 "audio": "<|audio_start|><|audio_pad|><|audio_end|>"},
                                "unsupported content part type: ")

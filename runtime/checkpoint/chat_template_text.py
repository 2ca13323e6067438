"""The ChatML Jinja chat template the demo checkpoint ships (our own text; same layout as Qwen3-Omni's)."""
from __future__ import annotations

# Content is a string or a list of parts {"type": "text"|"image"|"video"|"audio", ...}. Each media part becomes
# one placeholder pad between its start/end markers; the processor (or build_prompt_ids) expands the pad to the
# item's token count. Whitespace-control everywhere, so the only newlines are the ones ChatML puts after the role
# and after <|im_end|>.
def chatml_template(placeholders: dict[str, str], refusal: str, thinking: bool = False) -> str:
    """ChatML over string or part-list content: each media part type in `placeholders` renders as its markers and one
    pad; any other part type raises `refusal` + its type.

    `thinking` (a Thinking model's template): an assistant turn before the last user turn keeps only its answer (the
    text after its `</think>`, leading newlines dropped), as Qwen3 templates strip past reasoning, and the generation
    prompt opens the reasoning block (`<think>` and a newline), so the model writes its thoughts, `</think>`, then
    its answer."""
    media = "".join(f"{{%- elif part['type'] == '{kind}' -%}}{{{{- '{text}' -}}}}"
                    for kind, text in placeholders.items())
    text = "{{- part['text'] -}}"
    string = "{{- message['content'] -}}"
    last_user = past = opener = ""
    if thinking:
        last_user = ("{%- set ns = namespace(last_user=-1) -%}{%- for message in messages -%}"
                     "{%- if message['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
                     "{%- endfor -%}")
        past = "{%- set past = message['role'] == 'assistant' and loop.index0 < ns.last_user -%}"
        text = ("{%- if past and '</think>' in part['text'] -%}{{- part['text'].split('</think>')[-1].lstrip('\\n') -}}"
                "{%- else -%}{{- part['text'] -}}{%- endif -%}")
        string = ("{%- if past and '</think>' in message['content'] -%}"
                  "{{- message['content'].split('</think>')[-1].lstrip('\\n') -}}"
                  "{%- else -%}{{- message['content'] -}}{%- endif -%}")
        opener = "<think>\\n"
    return (
        last_user +
        "{%- for message in messages -%}"
        + past +
        "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
        "{%- if message['content'] is string -%}"
        + string +
        "{%- elif message['content'] is not none -%}"
        "{%- for part in message['content'] -%}"
        "{%- if part['type'] == 'text' -%}"
        + text
        + media +
        "{%- else -%}"
        f"{{{{- raise_exception('{refusal}' + part['type'] | string) -}}}}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- endif -%}"
        "{{- '<|im_end|>\\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}"
        "{{- '<|im_start|>assistant\\n" + opener + "' -}}"
        "{%- endif -%}"
    )


_OMNI_MEDIA = {"image": "<|vision_start|><|image_pad|><|vision_end|>",
               "video": "<|vision_start|><|video_pad|><|vision_end|>",
               "audio": "<|audio_start|><|audio_pad|><|audio_end|>"}
CHAT_TEMPLATE = chatml_template(_OMNI_MEDIA, "unsupported content part type: ")
# The Thinking variant's: past reasoning stripped, the generation prompt inside an open `<think>` block.
THINKING_CHAT_TEMPLATE = chatml_template(_OMNI_MEDIA, "unsupported content part type: ", thinking=True)

"""Qwen3-ASR's transcription prompt: an optional system turn holding the context (hotwords), a user turn holding
one audio item, and an assistant turn prefilled with `language <Name><asr_text>` when a language is forced, laid
out as transformers' `Qwen3ASRProcessor.apply_transcription_request` does it."""
from __future__ import annotations

from runtime.chat_template import ChatMessage, MediaPart, PromptIds, TextPart, build_prompt_ids
from runtime.errors import InvalidArgument, preview
from runtime.tokenizer import Tokenizer

# The names the model was trained with after `language `, by ISO code (Qwen3-ASR's 30 forced languages).
LANGUAGE_NAMES: dict[str, str] = {
    "ar": "Arabic", "yue": "Cantonese", "zh": "Chinese", "cs": "Czech", "da": "Danish", "nl": "Dutch",
    "en": "English", "fil": "Filipino", "fi": "Finnish", "fr": "French", "de": "German", "el": "Greek",
    "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "mk": "Macedonian", "ms": "Malay", "fa": "Persian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "es": "Spanish", "sv": "Swedish", "th": "Thai", "tr": "Turkish", "vi": "Vietnamese",
}
ASR_TEXT = "<asr_text>"


def language_name(language: str, field: str = "language") -> str | None:
    """'' -> None (the model detects the language); an ISO code or a full name (any case) -> the trained name."""
    if not language:
        return None
    key = language.strip().lower()
    if key in LANGUAGE_NAMES:
        return LANGUAGE_NAMES[key]
    for name in LANGUAGE_NAMES.values():
        if key == name.lower():
            return name
    raise InvalidArgument(field, f"unknown language {preview(language)}; use one of the codes "
                                 f"{', '.join(sorted(LANGUAGE_NAMES))} or their names (English, Chinese, ...)")


def assistant_prefill(language: str | None) -> str:
    """The start of the answer the model continues: the header naming a forced language, or nothing."""
    return f"language {language}{ASR_TEXT}" if language is not None else ""


def transcription_messages(language: str | None, context: str | None) -> list[ChatMessage]:
    """`language`: a trained name (see `language_name`) or None; `context`: the system text, None for no turn."""
    messages = [] if context is None else [ChatMessage("system", [TextPart(context)])]
    prefill = assistant_prefill(language)
    return [*messages, ChatMessage("user", [MediaPart("audio")]), ChatMessage("assistant", [TextPart(prefill)])]


def build_transcription_prompt(tokenizer: Tokenizer, template: str, num_audio_tokens: int,
                               language: str | None = None, context: str | None = None) -> PromptIds:
    """The prompt ids, `<|audio_pad|>` expanded to the clip's `num_audio_tokens`. Context is read as plain text
    (a special token it spells cannot forge a turn); the prefill is the template's own markup."""
    messages = transcription_messages(language, context)
    return build_prompt_ids(tokenizer, template, messages, [num_audio_tokens], add_generation_prompt=False,
                            special_in_text=False, continue_final_message=True)

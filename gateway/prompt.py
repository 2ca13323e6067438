"""Chat turns -> the thinker's prompt: chat template applied, media placeholders expanded."""
from __future__ import annotations

from pathlib import Path

from runtime.chat_template import ChatMessage, MediaPart, PromptIds, TextPart, build_prompt_ids, load_chat_template
from runtime.tokenizer import Tokenizer
from gateway.chat_input import ChatInput


class PromptBuilder:
    """Holds the checkpoint's tokenizer and chat template."""

    def __init__(self, tokenizer: Tokenizer, template: str) -> None:
        self.tokenizer = tokenizer
        self.template = template

    @classmethod
    def from_dir(cls, model_dir: Path) -> PromptBuilder:
        return cls(Tokenizer.from_dir(model_dir), load_chat_template(model_dir))

    def build(self, chat: ChatInput, media_token_counts: list[int]) -> PromptIds:
        messages = [ChatMessage(t.role, [TextPart(p) if isinstance(p, str) else MediaPart(p.kind) for p in t.parts])
                    for t in chat.turns]
        return build_prompt_ids(self.tokenizer, self.template, messages, media_token_counts)

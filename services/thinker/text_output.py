"""Streams a sequence's text: incremental detokenization, with stop strings held back until they cannot match."""
from __future__ import annotations

from typing import NamedTuple

from runtime.tokenizer import Tokenizer, find_stop, stop_holdback


class TextPiece(NamedTuple):
    text: str  # safe to show now
    stopped: bool  # a stop string was found; nothing after it will come


class TextOutput:
    """Feed token ids as they are sampled; get back text that is final (never retracted)."""

    def __init__(self, tokenizer: Tokenizer, stop_strings: tuple[str, ...]) -> None:
        self._detok = tokenizer.detokenizer()
        self._stops = stop_strings
        self._held = ""  # tail that could still turn into a stop string
        self.stopped = False

    def feed(self, token_ids: list[int]) -> TextPiece:
        if self.stopped:
            return TextPiece("", True)
        return self._emit(self._held + self._detok.feed(token_ids))

    def finish(self) -> str:
        """The rest of the text when the sequence ends: held-back characters and incomplete UTF-8 bytes."""
        if self.stopped:
            return ""
        piece = self._emit(self._held + self._detok.flush(), final=True)
        return piece.text

    def _emit(self, text: str, final: bool = False) -> TextPiece:
        cut = find_stop(text, self._stops)
        if cut is not None:
            self.stopped = True
            self._held = ""
            return TextPiece(text[:cut], True)
        keep = 0 if final else stop_holdback(text, self._stops)
        self._held = text[len(text) - keep:]
        return TextPiece(text[: len(text) - keep], False)

"""A Thinking model's reasoning apart from its answer: the text between `<think>` and `</think>` goes to the client
as reasoning deltas, the rest as the answer's text deltas, the markers themselves in neither.

The generation prompt may open the block itself (the model then writes its thoughts, `</think>`, its answer) or
leave it to the model (its first token is `<think>`); a deployment whose chat template never mentions `</think>`
has no reasoning and is left alone. The split is by token id, so a `</think>` inside a batch of tokens cuts the batch
there; the text is cut at the marker's text, which the `</think>` token alone writes."""
from __future__ import annotations

from dataclasses import dataclass

from omnimesh.v1 import common_pb2
from runtime.tokenizer import Tokenizer
from gateway.clients.thinker import TextChunk

OPEN, CLOSE = "<think>", "</think>"


@dataclass
class ReasoningChunk:
    text: str
    token_ids: list[int]
    logprobs: list[common_pb2.TokenLogprob]


@dataclass(frozen=True)
class ReasoningMarkers:
    """The deployment's `<think>` / `</think>` ids (`of`: None when it does not reason, see module doc)."""

    open_id: int
    close_id: int
    im_start_id: int

    @classmethod
    def of(cls, tokenizer: Tokenizer, chat_template: str) -> ReasoningMarkers | None:
        if CLOSE not in chat_template:
            return None
        try:
            return cls(tokenizer.token_id(OPEN), tokenizer.token_id(CLOSE), tokenizer.token_id("<|im_start|>"))
        except KeyError:  # a template that names the markers over a vocabulary without them: no reasoning
            return None

    def opened_by(self, prompt_ids: list[int]) -> bool:
        """Whether the prompt's last turn leaves a `<think>` block open (the generation prompt opened it)."""
        for token in reversed(prompt_ids):  # the last marker of the turn decides
            if token == self.open_id:
                return True
            if token in (self.close_id, self.im_start_id):
                return False
        return False


class ReasoningSplit:
    """Per request: feed each TextChunk in order, get it back as reasoning and answer pieces."""

    def __init__(self, markers: ReasoningMarkers, prompt_ids: list[int]) -> None:
        self._m = markers
        self._reasoning = markers.opened_by(prompt_ids)
        self._first = True  # no token seen yet: a first `<think>` opens the block
        self._after_close = False  # the answer's leading newlines after `</think>` are dropped, until its text

    def feed(self, chunk: TextChunk) -> list[ReasoningChunk | TextChunk]:
        ids, text = chunk.token_ids, chunk.text
        logprobs = chunk.logprobs if len(chunk.logprobs) == len(ids) else []
        if self._first and ids:
            self._first = False
            if not self._reasoning and ids[0] == self._m.open_id:
                self._reasoning = True
        if not self._reasoning:
            return [self._answer(chunk)]
        if self._m.close_id not in ids:
            return [ReasoningChunk(_strip_open(text), ids, logprobs)]
        cut = ids.index(self._m.close_id) + 1  # `</think>` closes the reasoning chunk
        thought, _, rest = text.partition(CLOSE)
        self._reasoning = False
        self._after_close = True
        out: list[ReasoningChunk | TextChunk] = [ReasoningChunk(_strip_open(thought), ids[:cut], logprobs[:cut])]
        if cut < len(ids) or rest:
            out.append(self._answer(TextChunk(ids[cut:], rest, logprobs[cut:])))
        return out

    def _answer(self, chunk: TextChunk) -> TextChunk:
        if not self._after_close:
            return chunk
        text = chunk.text.lstrip("\n")
        self._after_close = not text
        return TextChunk(chunk.token_ids, text, chunk.logprobs)


def _strip_open(text: str) -> str:
    """A reasoning chunk's text without the opening marker and the newline after it."""
    head, found, rest = text.partition(OPEN)
    return (head + rest.removeprefix("\n")) if found else text

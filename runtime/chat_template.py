"""Renders a checkpoint's Jinja chat template from our message dataclasses and builds the prompt's token ids."""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Literal, NamedTuple

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from runtime.errors import InvalidArgument
from runtime.tokenizer import Tokenizer

MediaKind = Literal["image", "audio", "video"]
MEDIA_KINDS: tuple[str, ...] = ("image", "audio", "video")
# The one placeholder token each media item renders to before expansion to its real token count.
PAD_TOKENS: dict[str, str] = {"image": "<|image_pad|>", "audio": "<|audio_pad|>", "video": "<|video_pad|>"}


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class MediaPart:
    """One image, audio clip or video; its pixels/samples travel separately (the gateway keeps them)."""

    kind: MediaKind

    def __post_init__(self) -> None:
        if self.kind not in MEDIA_KINDS:
            raise ValueError(f"MediaPart.kind={self.kind!r}; use one of {MEDIA_KINDS}")


@dataclass(frozen=True)
class ChatMessage:
    role: str
    parts: list[TextPart | MediaPart] = field(default_factory=list)

    def to_template_dict(self) -> dict[str, Any]:
        """The `{"role", "content": [parts]}` shape chat templates (and transformers) expect."""
        content: list[dict[str, str]] = [
            {"type": "text", "text": p.text} if isinstance(p, TextPart) else {"type": p.kind} for p in self.parts
        ]
        return {"role": self.role, "content": content}

    def media_kinds(self) -> list[str]:
        return [p.kind for p in self.parts if isinstance(p, MediaPart)]


class MediaSpan(NamedTuple):
    """Where one media item's tokens sit in the prompt. `index` is the item's position among all media items
    of the prompt in order of appearance (the index into `media_token_counts`)."""

    kind: str
    start: int
    length: int
    index: int


class PromptIds(NamedTuple):
    ids: list[int]
    spans: list[MediaSpan]


class TemplateError(Exception):
    """The template itself called `raise_exception` (e.g. an unsupported content part)."""


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


@lru_cache(maxsize=8)
def compile_template(template: str) -> jinja2.Template:
    """Sandboxed and immutable (a template cannot touch Python objects); the same environment settings and
    helpers that chat templates are written against (trim/lstrip blocks, loop controls, tojson, raise_exception)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def load_chat_template(ckpt_dir: Path) -> str:
    """The checkpoint's template: `chat_template.jinja`, else `tokenizer_config.json`, else `chat_template.json`."""
    ckpt_dir = Path(ckpt_dir)
    jinja_file = ckpt_dir / "chat_template.jinja"
    if jinja_file.exists():
        return jinja_file.read_text(encoding="utf-8")
    for name in ("tokenizer_config.json", "chat_template.json"):
        path = ckpt_dir / name
        if path.exists():
            template = json.loads(path.read_text(encoding="utf-8")).get("chat_template")
            if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
                template = {t["name"]: t["template"] for t in template}.get("default")
            if template:
                return template
    raise FileNotFoundError(
        f"no chat template in {ckpt_dir} (looked in chat_template.jinja, tokenizer_config.json, chat_template.json)"
    )


_CONTINUE_TAG = "\ue002"  # private-use mark after the final message's text; the prompt ends where it stands


def render_chat(
    template: str, messages: Sequence[ChatMessage], add_generation_prompt: bool = True,
    continue_final_message: bool = False, **extra: Any
) -> str:
    """The prompt text; `extra` reaches the template as variables (e.g. `enable_thinking`).

    `continue_final_message`: the prompt ends right after the last message's last text part (an assistant turn the
    model continues, such as Qwen3-ASR's `language English<asr_text>`), as transformers' option of that name.
    """
    dicts = [m.to_template_dict() for m in messages]
    if continue_final_message:
        texts = [part for part in dicts[-1]["content"] if part["type"] == "text"] if dicts else []
        if not texts:
            raise ValueError("continue_final_message needs a final message with a text part to continue")
        texts[-1]["text"] += _CONTINUE_TAG
    rendered = compile_template(template).render(messages=dicts, add_generation_prompt=add_generation_prompt, **extra)
    if continue_final_message:
        if _CONTINUE_TAG not in rendered:
            raise TemplateError("the chat template dropped the final message's text, so it cannot be continued")
        rendered = rendered[:rendered.rindex(_CONTINUE_TAG)]
    return rendered


def build_prompt_ids(
    tokenizer: Tokenizer,
    template: str,
    messages: Sequence[ChatMessage],
    media_token_counts: Sequence[int],
    add_generation_prompt: bool = True,
    special_in_text: bool = True,
    continue_final_message: bool = False,
) -> PromptIds:
    """Token ids of the rendered prompt with each media pad expanded to its item's token count.

    `media_token_counts[i]` is the number of LLM tokens of the i-th media item in order of appearance
    (e.g. t*h*w/4 for an image, the AuT output length for audio). With `special_in_text=False`, a special token's
    string inside a text part (`<|im_start|>` typed by a user) is tokenized as plain characters, so text cannot
    forge turns or media; only the template's own markup yields special tokens.
    """
    kinds = [kind for m in messages for kind in m.media_kinds()]
    if len(media_token_counts) != len(kinds):
        raise ValueError(f"media_token_counts has {len(media_token_counts)} entries for {len(kinds)} media items")
    for i, count in enumerate(media_token_counts):
        if count < 1:
            raise ValueError(f"media_token_counts[{i}]={count}; every media item needs at least one token")
    pad_kind = {tokenizer.token_id(tok): kind for kind, tok in PAD_TOKENS.items()}
    if special_in_text or not _spells_special(tokenizer, messages):  # the common case: one encode, as transformers
        rendered = tokenizer.encode(render_chat(template, messages, add_generation_prompt, continue_final_message))
    else:
        rendered = _encode_text_literally(tokenizer, template, messages, add_generation_prompt, continue_final_message)
    found = [pad_kind[t] for t in rendered if t in pad_kind]
    if found != kinds:
        # Only reachable when message text itself spells a pad token: the prompt would misplace media.
        raise InvalidArgument(
            "messages",
            f"media placeholders in the prompt {found} do not match the media parts {kinds}; "
            f"text must not contain {sorted(PAD_TOKENS.values())}",
        )
    ids: list[int] = []
    spans: list[MediaSpan] = []
    for token in rendered:
        kind = pad_kind.get(token)
        if kind is None:
            ids.append(token)
            continue
        index = len(spans)
        spans.append(MediaSpan(kind, len(ids), media_token_counts[index], index))
        ids.extend([token] * media_token_counts[index])
    return PromptIds(ids, spans)


_SLOT = re.compile("\ue000([0-9]+)\ue001")  # private-use marks: a template emits them only where text was


def _spells_special(tokenizer: Tokenizer, messages: Sequence[ChatMessage]) -> bool:
    texts = [p.text for m in messages for p in m.parts if isinstance(p, TextPart)]
    return any(special in text for text in texts for special in tokenizer.special_tokens)


def _encode_text_literally(tokenizer: Tokenizer, template: str, messages: Sequence[ChatMessage],
                           add_generation_prompt: bool, continue_final_message: bool = False) -> list[int]:
    """The template rendered around a slot per text part; markup encoded with special tokens, each text without."""
    texts: list[str] = []
    slotted = []
    for m in messages:
        parts: list[TextPart | MediaPart] = []
        for p in m.parts:
            if isinstance(p, TextPart):
                parts.append(TextPart(f"\ue000{len(texts)}\ue001"))
                texts.append(p.text)
            else:
                parts.append(p)
        slotted.append(ChatMessage(m.role, parts))
    render = partial(render_chat, template, add_generation_prompt=add_generation_prompt,
                     continue_final_message=continue_final_message)
    pieces = _SLOT.split(render(slotted))  # markup, slot, markup, ...
    slots = [int(i) for i in pieces[1::2]]
    if slots != list(range(len(texts))) or _filled(pieces, texts) != render(messages):
        raise InvalidArgument("messages", "text spells a special token (such as <|im_start|>), which this deployment "
                              "reads as plain text, but its chat template rewrites text; remove the special token")
    ids: list[int] = []
    for k, piece in enumerate(pieces):
        ids += tokenizer.encode(texts[int(piece)], allow_special=False) if k % 2 else tokenizer.encode(piece)
    return ids


def _filled(pieces: list[str], texts: list[str]) -> str:
    """The slotted rendering with each text back in its slot: equal to the plain rendering unless the template
    rewrites text (trims, splits, changes case), which the slots would silently undo."""
    return "".join(texts[int(p)] if k % 2 else p for k, p in enumerate(pieces))

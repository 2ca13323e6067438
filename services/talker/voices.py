"""The voices a checkpoint speaks with: its speaker table, the default first, and request names resolved to them."""
from __future__ import annotations

from runtime.errors import InvalidArgument
from services.talker.model.config import TalkerConfig

DEFAULT_VOICE = "ethan"  # the reference's `generate(speaker="Ethan")` default


def voice_names(cfg: TalkerConfig) -> list[str]:
    """Lower-case speaker names: the default voice first (when the checkpoint has it), then the rest sorted."""
    names = sorted(cfg.speakers)
    if DEFAULT_VOICE in names:
        names.remove(DEFAULT_VOICE)
        names.insert(0, DEFAULT_VOICE)
    return names


def resolve_voice(name: str, voices: list[str], field: str = "start.voice") -> str:
    """A request's voice: empty means the default; names are case-insensitive; unknown ones list the known."""
    if not name:
        return voices[0]
    voice = name.lower()
    if voice not in voices:
        raise InvalidArgument(field, f"unknown voice {name!r}; this model speaks {', '.join(voices)}")
    return voice

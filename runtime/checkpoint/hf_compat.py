"""Workarounds that transformers needs to run a Qwen3-Omni checkpoint (used by the demo builder and the tests)."""
from __future__ import annotations

from typing import Any


def apply_talker_audio_config_fix(config: Any) -> None:
    """transformers 5.24's talker `get_rope_index` reads `talker_config.audio_config.n_window`, which only the
    thinker config has, so audio input + audio output raises AttributeError. Share the thinker's audio config.

    `config` is a transformers `Qwen3OmniMoeConfig` (also the one a loaded model holds: `model.config`).
    """
    config.talker_config.audio_config = config.thinker_config.audio_config

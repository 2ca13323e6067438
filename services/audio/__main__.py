"""`python -m services.audio`: the audio stage process."""
from __future__ import annotations

from runtime.stage_main import run_stage
from services.audio.build import build_audio

if __name__ == "__main__":
    run_stage("audio", build_audio)

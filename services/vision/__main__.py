"""`python -m services.vision`: the vision stage process."""
from __future__ import annotations

from runtime.stage_main import run_stage
from services.vision.build import build_vision

if __name__ == "__main__":
    run_stage("vision", build_vision)

"""`python -m services.thinker`: the Thinker stage process."""
from __future__ import annotations

from runtime.stage_main import run_stage
from services.thinker.build import build_thinker

if __name__ == "__main__":
    run_stage("thinker", build_thinker)

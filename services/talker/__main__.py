"""`python -m services.talker`: the Talker stage process."""
from __future__ import annotations

from runtime.stage_main import run_stage
from services.talker.build import build_talker

if __name__ == "__main__":
    run_stage("talker", build_talker)

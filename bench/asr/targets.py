"""Issue 24's targets for Transcribe on one H200 and the peer's figures they are set against."""
from __future__ import annotations

from typing import Any

# requests/s at concurrency c (closed loop, 4 s clips, 40 output tokens)
REQUESTS_PER_S = {16: 150.0, 32: 200.0, 64: 250.0}
C1_LATENCY_MS_P50 = 60.0  # a 4 s clip at c = 1, request start -> last event

PEER = {
    "name": "SGLang-Omni",
    "setup": "one GPU, Qwen3-ASR-1.7B, SeedTTS clips (issue 24)",
    "requests_per_s": {"16": 77.0, "32": 90.0, "64": 97.0},
}


def summary(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """Each target with our figure (None: that level was not run or did not finish) and whether it is met."""
    by_c = {lv["concurrency"]: lv for lv in levels}
    out: dict[str, Any] = {}
    for c, target in REQUESTS_PER_S.items():
        ours = by_c.get(c, {}).get("requests_per_s")
        out[f"c{c}_requests_per_s"] = {"target": target, "ours": ours, "met": None if ours is None else ours >= target,
                                       "peer": PEER["requests_per_s"][str(c)]}
    ours = by_c.get(1, {}).get("latency_ms_p50")
    out["c1_latency_ms_p50"] = {"target": C1_LATENCY_MS_P50, "ours": ours,
                                "met": None if ours is None else ours <= C1_LATENCY_MS_P50}
    checked = [v["met"] for v in out.values()]
    out["all_met"] = all(checked) if None not in checked else None
    return out

"""What `omnimesh chat --json` and `omnimesh transcribe --json` print: one JSON object per client event (omnimesh
events), and one for a failed call."""
from __future__ import annotations

import base64

from omnimesh import (AudioDelta, AudioFailed, Done, Language, OmnimeshError, Partial, ReasoningDelta, TextDelta,
                      Transcript, Usage)


def event_json(event: object) -> dict:
    """A chat or transcription event; a token's text is its bytes decoded with replacement (it may be part of a
    character)."""
    if isinstance(event, (TextDelta, ReasoningDelta)):
        out = {"type": "text" if isinstance(event, TextDelta) else "reasoning", "text": event.text,
               "token_ids": list(event.token_ids)}
        if event.logprobs:
            out["logprobs"] = [{"token_id": lp.token_id, "token": lp.token, "logprob": lp.logprob,
                                "top": [[t.token_id, t.logprob, t.token] for t in lp.top]} for lp in event.logprobs]
        return out
    if isinstance(event, AudioDelta):
        out = {"type": "audio", "index": event.index, "sample_rate": event.sample_rate,
               "num_samples": len(event.pcm16) // 2, "num_frames": event.num_frames,
               "pcm16_base64": base64.b64encode(event.pcm16).decode("ascii")}
        if event.codes:
            out["codes"] = list(event.codes)
        return out
    if isinstance(event, Usage):
        return {"type": "usage", "prompt_tokens": event.prompt_tokens, "completion_tokens": event.completion_tokens,
                "cached_prompt_tokens": event.cached_prompt_tokens, "audio_seconds": event.audio_seconds}
    if isinstance(event, Done):
        timing = {"timing": dict(event.timing)} if event.timing else {}  # ms by phase (omnimesh/timing.py)
        return {"type": "done", "finish_reason": event.finish_reason, **timing}
    if isinstance(event, Language):
        return {"type": "language", "language": event.language}
    if isinstance(event, Transcript):
        return {"type": "transcript", "language": event.language, "text": event.text}
    if isinstance(event, Partial):
        return {"type": "partial", "language": event.language, "text": event.text}
    assert isinstance(event, AudioFailed), f"no JSON line for a {type(event).__name__}"
    return {"type": "error", "code": event.code, "message": event.message, "stage": event.stage}


def error_json(err: OmnimeshError) -> dict:
    out = {"type": "error", "code": err.code.name, "message": err.message}
    if err.field_violations:
        out["field_violations"] = [{"field": v.field, "description": v.description} for v in err.field_violations]
    return out

"""TalkerSampling names the bad field and what is allowed (the picks' rules: tests/unit/sampler)."""
from __future__ import annotations

import pytest

from services.talker.model.sampling import TalkerSampling


@pytest.mark.parametrize(
    ("field", "value", "allowed"), [
        ("temperature", 0.0, "must be > 0"), ("temperature", float("nan"), "must be > 0"),
        ("predictor_temperature", -1.0, "must be > 0"), ("top_p", 1.5, r"must be in \(0, 1\]"),
        ("predictor_top_p", 0.0, r"must be in \(0, 1\]"), ("top_k", -1, "must be >= 0"),
        ("predictor_top_k", -2, "must be >= 0"), ("repetition_penalty", 0, "must be > 0"),
        ("repetition_penalty", float("inf"), "not NaN or infinite"),
    ]
)
def test_bad_sampling_names_the_field_and_what_is_allowed(field: str, value: float, allowed: str) -> None:
    with pytest.raises(ValueError, match=f"TalkerSampling.{field}=.*: .*{allowed}"):
        TalkerSampling(**{field: value})

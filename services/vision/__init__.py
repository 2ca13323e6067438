"""Vision stage: Qwen3-Omni's vision tower and the patchify/normalise step that feeds it."""

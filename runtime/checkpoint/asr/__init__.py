"""Qwen3-ASR checkpoints: its token ids and the tiny random demo checkpoint in the `-hf` layout."""

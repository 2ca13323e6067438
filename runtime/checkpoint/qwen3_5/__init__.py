"""Qwen3.5 checkpoints (dense and MoE): the tiny random demo checkpoint in transformers' ConditionalGeneration
layout."""

"""The demo checkpoint: a tiny random Qwen3-Omni with the real layout, ids and tokenizer, for tests and laptops."""

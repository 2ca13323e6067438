"""Builds the tiny random demo checkpoint (real layout, ids and tokenizer) that the tests and `omnimesh demo-checkpoint` use."""

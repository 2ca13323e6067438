"""The Thinker stage: the MoE language model service."""

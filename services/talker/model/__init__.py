"""The talker's networks in plain PyTorch (Talker MoE, code predictor, Code2Wav), its prompt and reference loop."""

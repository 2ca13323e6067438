"""The talker's models in plain PyTorch: Talker MoE LM, code predictor, Code2Wav, prompt building and a reference loop."""

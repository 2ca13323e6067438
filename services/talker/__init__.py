"""The talker stage: Talker MoE, code predictor and Code2Wav, turning thinker text into 24 kHz speech."""

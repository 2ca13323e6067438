"""A randomly initialised talker stage at the demo checkpoint's dims, built in memory (no files, no transformers)."""
from __future__ import annotations

import torch
from torch import nn

from runtime.checkpoint.demo_config import demo_config
from services.talker.model.code2wav import Code2Wav
from services.talker.model.code_predictor import CodePredictor
from services.talker.model.config import TalkerConfig, parse_talker_config
from services.talker.model.load import TalkerModel
from services.talker.model.talker_lm import TalkerLM

THINKER_VOCAB = 152064  # the real id range: prompt ids index the embedding table


def tiny_config() -> TalkerConfig:
    return parse_talker_config(demo_config())


def tiny_talker(seed: int = 0) -> TalkerModel:
    torch.manual_seed(seed)
    cfg = tiny_config()
    lm, predictor, code2wav = TalkerLM(cfg.lm), CodePredictor(cfg.code_predictor), Code2Wav(cfg.code2wav)
    for module in (lm, predictor, code2wav):
        for p in module.parameters():
            nn.init.normal_(p, std=0.2)
        module.eval().requires_grad_(False)
    embed = torch.randn(THINKER_VOCAB, cfg.lm.thinker_hidden_size) * 0.2
    return TalkerModel(cfg, lm, predictor, code2wav, embed)

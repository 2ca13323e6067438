"""Each talker-stage network equals its transformers counterpart on the demo checkpoint (fp32, ~1e-5 relative)."""
from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from services.talker.model.load import TalkerModel


def assert_close(ours: torch.Tensor, ref: torch.Tensor, rel: float = 1e-5) -> None:
    err, scale = (ours - ref).abs().max().item(), ref.abs().max().item()
    assert err <= rel * max(scale, 1e-6), f"max abs err {err:.3g} vs scale {scale:.3g}"


def test_talker_lm_prefill_and_decode(hf_omni: Any, talker_model: TalkerModel) -> None:
    """Prefill at 3-D positions with an image-like block, then two cached decode steps."""
    g = torch.Generator().manual_seed(1)
    dim, steps = talker_model.cfg.lm.hidden_size, 9
    x = torch.randn(1, steps + 2, dim, generator=g)
    pos = torch.arange(steps + 2, dtype=torch.float32).expand(3, 1, -1).clone()
    pos[:, 0, 3:7] = torch.tensor([[3, 3, 3, 3], [3, 3, 4, 4], [3, 4, 3, 4]], dtype=torch.float32)
    pos[:, 0, 7:] -= 2  # text resumes at max + 1
    cache = DynamicCache(config=hf_omni.talker.config.text_config)
    with torch.no_grad():
        ref = [hf_omni.talker.model(inputs_embeds=x[:, :steps], position_ids=pos[:, :, :steps], cache=cache,
                                    use_cache=True).last_hidden_state]  # fmt: skip
        for t in (steps, steps + 1):
            ref.append(hf_omni.talker.model(inputs_embeds=x[:, t : t + 1], position_ids=pos[:, :, t : t + 1],
                                            cache=cache, use_cache=True).last_hidden_state)  # fmt: skip
        kv = talker_model.lm.new_kv(num_slots=3, capacity=16)
        slot = torch.tensor([2])
        ours = [talker_model.lm(x[:, :steps], pos[:, :, :steps], kv, slot, torch.tensor([0]))]
        for t in (steps, steps + 1):
            ours.append(talker_model.lm(x[:, t : t + 1], pos[:, :, t : t + 1], kv, slot, torch.tensor([t])))
    for a, b in zip(ours, ref):
        assert_close(a, b)
    assert_close(talker_model.lm.codec_head(ours[-1]), hf_omni.talker.codec_head(ref[-1]))


def test_projections(hf_omni: Any, talker_model: TalkerModel) -> None:
    x = torch.randn(5, talker_model.cfg.lm.thinker_hidden_size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert_close(talker_model.lm.text_projection(x), hf_omni.talker.text_projection(x))
        assert_close(talker_model.lm.hidden_projection(x), hf_omni.talker.hidden_projection(x))
        ids = torch.tensor([10, 151671, 151673])
        ref = hf_omni.talker.text_projection(hf_omni.thinker.get_input_embeddings()(ids))
        assert_close(talker_model.text_embeds(ids), ref)


def test_code_predictor_greedy(hf_omni: Any, talker_model: TalkerModel) -> None:
    """Two rows at once; the reference runs each row through its own `generate`."""
    g = torch.Generator().manual_seed(3)
    dim = talker_model.cfg.lm.hidden_size
    past, code0 = torch.randn(2, dim, generator=g), torch.tensor([17, 1900])
    with torch.no_grad():
        e0 = talker_model.lm.codec_embedding(code0)
        residuals = talker_model.predictor.predict(past, e0, lambda group, logits: logits.argmax(-1))
        for row in range(2):
            ref = hf_omni.talker.code_predictor.generate(
                inputs_embeds=torch.stack((past[row], e0[row]))[None], max_new_tokens=15, do_sample=False,
            )  # fmt: skip
            assert residuals.codes[row].tolist() == ref[0].tolist()
            tables = hf_omni.talker.code_predictor.get_input_embeddings()
            expected = e0[row] + sum(tables[i](ref[0, i]) for i in range(15))
            assert_close(residuals.embed_sum[row], expected)


def test_code2wav_forward(hf_omni: Any, talker_model: TalkerModel) -> None:
    codes = torch.randint(0, 2048, (2, 16, 11), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours, ref = talker_model.code2wav(codes), hf_omni.code2wav(codes)
    assert ours.shape == ref.shape == (2, 1, talker_model.code2wav.output_length(11))
    assert_close(ours, ref)

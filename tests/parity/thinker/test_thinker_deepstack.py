"""Multimodal parity: the reference's encoder and deepstack outputs fed to our Thinker give the reference's outputs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from runtime.checkpoint import token_ids as ids
from services.thinker.model import DeepstackInput, ThinkerLM, decode_positions, prompt_positions
from tests.parity.thinker.thinker_layouts import Layout, head, tail
from tests.parity.thinker.thinker_paged_runner import Feed, PagedRunner

TOL = dict(rtol=1e-5, atol=1e-5)
PATCH_DIM = 3 * 2 * 16 * 16  # channels x temporal patch x patch x patch
DECODE_STEPS = 3


@dataclass
class MultimodalCase:
    layout: Layout
    inputs: dict[str, torch.Tensor]  # the reference's forward/generate kwargs
    logits: torch.Tensor  # [L, V]
    hidden_states: tuple[torch.Tensor, ...]
    step_logits: list[torch.Tensor]  # generate's raw logits: prefill last row, then each decode step
    tokens: list[int]


@pytest.fixture(scope="module")
def case(hf_omni: Any) -> MultimodalCase:
    layout = (Layout().text(head()).audio(230).text([104]).image((1, 4, 6)).text([105])
              .video((2, 4, 4), 1.0).text(tail()))
    gen = torch.Generator().manual_seed(0)
    kw = layout.rope_index_kwargs()
    frames = layout.audio_frames[0]
    inputs = dict(
        input_ids=kw["input_ids"], attention_mask=kw["attention_mask"],
        input_features=torch.randn(1, 128, frames, generator=gen),
        feature_attention_mask=torch.ones(1, frames, dtype=torch.long),
        pixel_values=torch.randn(1 * 4 * 6, PATCH_DIM, generator=gen), image_grid_thw=kw["image_grid_thw"],
        pixel_values_videos=torch.randn(2 * 4 * 4, PATCH_DIM, generator=gen), video_grid_thw=kw["video_grid_thw"],
        video_second_per_grid=kw["second_per_grids"],
    )
    with torch.inference_mode():
        out = hf_omni.thinker(**inputs, output_hidden_states=True)
        generated = hf_omni.thinker.generate(
            **inputs, max_new_tokens=DECODE_STEPS + 1, do_sample=False, output_logits=True, return_dict_in_generate=True
        )
    prompt_len = len(layout.token_ids)
    assert generated.sequences.shape[1] == prompt_len + DECODE_STEPS + 1, "reference stopped early"
    return MultimodalCase(
        layout=layout, inputs=inputs, logits=out.logits[0], hidden_states=tuple(h[0] for h in out.hidden_states),
        step_logits=[s[0] for s in generated.logits], tokens=generated.sequences[0, prompt_len:].tolist(),
    )


def our_prompt_feed(thinker_lm: ThinkerLM, hf_omni: Any, case: MultimodalCase) -> tuple[Feed, DeepstackInput]:
    """Embeddings with the reference encoders' outputs scattered in, and deepstack features aligned to visual rows."""
    thinker, inputs = hf_omni.thinker.model, case.inputs
    with torch.inference_mode():
        audio = thinker.get_audio_features(inputs["input_features"], inputs["feature_attention_mask"])
        image = thinker.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"])
        video = thinker.get_video_features(inputs["pixel_values_videos"], inputs["video_grid_thw"])
        token_ids = torch.tensor(case.layout.token_ids)
        rows = {pad: (token_ids == pad).nonzero().squeeze(1) for pad in (ids.AUDIO_PAD, ids.IMAGE_PAD, ids.VIDEO_PAD)}
        x = thinker_lm.embed(token_ids).clone()
        x[rows[ids.AUDIO_PAD]] = audio.last_hidden_state
        x[rows[ids.IMAGE_PAD]] = torch.cat(image.pooler_output)
        x[rows[ids.VIDEO_PAD]] = torch.cat(video.pooler_output)
    visual_rows = torch.cat([rows[ids.IMAGE_PAD], rows[ids.VIDEO_PAD]])
    order = visual_rows.argsort()  # the image comes first in this layout, but sort as any caller must
    features = [
        torch.cat([torch.cat(img), torch.cat(vid)])[order]
        for img, vid in zip(image.deepstack_features, video.deepstack_features)
    ]
    positions = prompt_positions(case.layout.token_ids, case.layout.spans, thinker_lm.cfg).positions
    return Feed(0, x, positions), DeepstackInput(row_index=visual_rows[order], features=features)


def test_deepstack_prompt_logits_and_captured_layer(thinker_lm: ThinkerLM, hf_omni: Any, case: MultimodalCase) -> None:
    feed, deepstack = our_prompt_feed(thinker_lm, hf_omni, case)
    assert len(deepstack.features) == thinker_lm.cfg.num_deepstack
    layer = thinker_lm.cfg.accept_hidden_layer
    assert layer is not None and layer <= thinker_lm.cfg.num_deepstack  # so capture-before-deepstack is exercised
    result = PagedRunner(thinker_lm, seed=6).step([feed], deepstack=deepstack, capture_layer=layer)[0]
    torch.testing.assert_close(result.logits, case.logits, **TOL)
    torch.testing.assert_close(result.captured, case.hidden_states[layer], **TOL)


def test_decode_after_multimodal_prompt_uses_rope_delta(
    thinker_lm: ThinkerLM, hf_omni: Any, case: MultimodalCase
) -> None:
    feed, deepstack = our_prompt_feed(thinker_lm, hf_omni, case)
    rope_delta = prompt_positions(case.layout.token_ids, case.layout.spans, thinker_lm.cfg).rope_delta
    assert rope_delta != 0  # media shift positions, so decode positions differ from KV indices
    runner = PagedRunner(thinker_lm, seed=7)
    prefill = runner.step([feed], deepstack=deepstack)[0]
    torch.testing.assert_close(prefill.logits[-1], case.step_logits[0], **TOL)
    for step in range(DECODE_STEPS):
        position = decode_positions(torch.tensor([runner.kv_len(0)]), torch.tensor([rope_delta]))
        token_feed = runner.text_feed(0, [case.tokens[step]], rope_delta)
        assert torch.equal(token_feed.positions, position)
        result = runner.step([token_feed])[0]
        torch.testing.assert_close(result.logits[0], case.step_logits[step + 1], **TOL)

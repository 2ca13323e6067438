"""Greedy talker codes (all 16 codebooks) equal transformers' `generate` on the demo checkpoint, text and media in.

Our side gets only what the mesh sends: prompt ids, the thinker's hidden states at user-turn media pads (taken
from the reference's own thinker run), and the generated thinker ids one at a time.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from tests.parity.talker.talker_reference import (
    ASSISTANT_HEADER, SYSTEM_TURN, ReferenceSpeech, assert_codes_match, reference_speech, text_prompt, user_turn,
)

from runtime.checkpoint import token_ids as T
from runtime.checkpoint.hf_compat import apply_talker_audio_config_fix
from tests.talker_lockstep import lockstep_generate
from services.talker.model.load import TalkerModel, load_talker_model
from services.talker.model.mrope import VisualGrid
from services.talker.model.prompt import SpeechPrompt, user_turn_positions

MAX_FRAMES = 24


def ours(model: TalkerModel, prompt: list[int], ref: ReferenceSpeech, voice: str, eos: int,
         **media: Any) -> Any:  # fmt: skip
    hidden = ref.media_hidden(prompt, user_turn_positions(prompt, model.cfg))
    speech = SpeechPrompt(prompt, voice, hidden if len(hidden) else None, **media)
    (result,) = lockstep_generate(
        model, [speech], [iter(ref.spoken_text(eos))], max_frames=MAX_FRAMES, record_margins=True,
        thinker_eos=frozenset({eos}),
    )  # fmt: skip
    return result


def test_text_input_matches(hf_omni: Any, talker_model: TalkerModel) -> None:
    prompt = text_prompt([200, 300, 400, 500])
    ref = reference_speech(hf_omni, prompt, "Chelsie", T.IM_END, max_text=10, max_frames=MAX_FRAMES)
    matched = assert_codes_match(ref.codes, ours(talker_model, prompt, ref, "chelsie", T.IM_END), min_frames=8)
    assert ref.codes.shape[0] == 16 and matched >= 8


def test_text_input_with_thinker_eos_matches(hf_omni: Any, talker_model: TalkerModel) -> None:
    """The thinker stops on its end token mid-run: the talker gets `tts_eos` then pads, as the reference does."""
    prompt = text_prompt([210, 310, 410])
    first = reference_speech(hf_omni, prompt, "Ethan", T.IM_END, max_text=8, max_frames=2)
    # make the 4th generated token the end of turn (the first id that did not occur before it)
    k = next(i for i in range(3, 8) if first.generated[i] not in first.generated[:i])
    eos = first.generated[k]
    ref = reference_speech(hf_omni, prompt, "Ethan", eos, max_text=8, max_frames=MAX_FRAMES)
    assert ref.generated[-1] == eos and len(ref.generated) == k + 1
    assert_codes_match(ref.codes, ours(talker_model, prompt, ref, "ethan", eos), min_frames=8)


def _audio_image_prompt() -> tuple[list[int], dict[str, Any]]:
    audio = [T.AUDIO_START] + [T.AUDIO_PAD] * 13 + [T.AUDIO_END]  # 100 mel frames -> 13 tokens
    image = [T.VISION_START] + [T.IMAGE_PAD] * 4 + [T.VISION_END]  # a 4x4-patch image merges to 2x2 tokens
    prompt = SYSTEM_TURN + user_turn(audio + image + [220, 320]) + ASSISTANT_HEADER
    g = torch.Generator().manual_seed(5)
    media = {
        "input_features": torch.randn(1, 128, 100, generator=g),
        "feature_attention_mask": torch.ones(1, 100, dtype=torch.long),
        "pixel_values": torch.randn(16, 3 * 2 * 16 * 16, generator=g),
        "image_grid_thw": torch.tensor([[1, 4, 4]]),
    }
    return prompt, media


def test_audio_and_image_input_matches(hf_omni: Any, talker_model: TalkerModel) -> None:
    prompt, media = _audio_image_prompt()
    ref = reference_speech(hf_omni, prompt, "Aiden", T.IM_END, max_text=8, max_frames=MAX_FRAMES, **media)
    result = ours(talker_model, prompt, ref, "aiden", T.IM_END, images=(VisualGrid(1, 4, 4),))
    assert_codes_match(ref.codes, result, min_frames=8)


@pytest.mark.parametrize("seconds_per_grid", [2.0, 0.5])
def test_video_input_matches(hf_omni: Any, talker_model: TalkerModel, seconds_per_grid: float) -> None:
    """Videos spread M-RoPE time by seconds_per_grid * 13, fractional at 4 fps (0.5 s per 2-frame grid)."""
    video = [T.VISION_START] + [T.VIDEO_PAD] * 8 + [T.VISION_END]  # grid (2, 4, 4) -> 2 x 2x2 tokens
    prompt = SYSTEM_TURN + user_turn(video + [230]) + ASSISTANT_HEADER
    g = torch.Generator().manual_seed(7)
    media = {
        "pixel_values_videos": torch.randn(32, 3 * 2 * 16 * 16, generator=g),
        "video_grid_thw": torch.tensor([[2, 4, 4]]),
        "video_second_per_grid": torch.tensor([seconds_per_grid]),
    }
    ref = reference_speech(hf_omni, prompt, "Ethan", T.IM_END, max_text=6, max_frames=MAX_FRAMES, **media)
    result = ours(talker_model, prompt, ref, "ethan", T.IM_END, videos=(VisualGrid(2, 4, 4, seconds_per_grid),))
    assert_codes_match(ref.codes, result, min_frames=8)


@pytest.fixture(scope="module")
def eos_ckpt(demo_ckpt: Path, hf_omni: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo checkpoint with the codec-EOS row of `codec_head` made a 1.02x copy of the row of the code the
    talker picks (first time) at frame 5 or later, so greedy decoding ends with EOS within a few frames."""
    run = reference_speech(hf_omni, text_prompt([200, 300, 400, 500]), "Ethan", T.IM_END, max_text=10, max_frames=8)
    code0 = run.codes[0].tolist()
    frame = next(f for f in range(5, 8) if code0[f] not in code0[:f])
    out = tmp_path_factory.mktemp("eos_ckpt")
    shutil.copytree(demo_ckpt, out, dirs_exist_ok=True)
    tensors = load_file(out / "model.safetensors")
    head = tensors["talker.codec_head.weight"]
    head[T.CODEC_EOS] = 1.02 * head[code0[frame]]
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    return out


def test_codec_eos_ends_speech_like_the_reference(eos_ckpt: Path) -> None:
    """The talker's EOS ends a row without a frame for it; frames = talker tokens - 1, as in the reference."""
    import transformers

    hf = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        eos_ckpt, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    apply_talker_audio_config_fix(hf.config)
    model = load_talker_model(eos_ckpt)
    prompt = text_prompt([200, 300, 400, 500])
    ref = reference_speech(hf, prompt, "Ethan", T.IM_END, max_text=10, max_frames=MAX_FRAMES)
    result = ours(model, prompt, ref, "ethan", T.IM_END)
    assert ref.codes.shape[1] < MAX_FRAMES  # the reference stopped on EOS
    assert assert_codes_match(ref.codes, result) == ref.codes.shape[1] == result.codes.shape[1]

"""AudioBatchPlan: windows never cross clips, launches are bounded, masks appear only for short clips; bucketed plans
(the CUDA-graph inputs) have shapes fixed by their bucket."""
from __future__ import annotations

import pytest
import torch

from runtime.audio_lengths import audio_token_count
from services.audio.model.config import AudioEncoderConfig
from services.audio.model.plan import bucket_chunks, bucket_key, plan_batch, plan_bucketed

CONFIG = AudioEncoderConfig()  # real dims: 100-frame chunks, 104-token windows


def window_lengths(plan) -> list[int]:  # type: ignore[no-untyped-def]
    return (plan.cu_seqlens[1:] - plan.cu_seqlens[:-1]).tolist()


def test_windows_are_104_tokens_and_restart_at_each_clip() -> None:
    plan = plan_batch([1234, 30, 6000], CONFIG)
    assert plan.token_counts == (161, 4, 780)
    assert window_lengths(plan) == [104, 57, 4] + [104] * 7 + [52]
    assert plan.cu_seqlens.dtype == torch.int32 and int(plan.cu_seqlens[-1]) == plan.num_tokens
    assert plan.max_window == 104


def test_padded_window_layout_round_trips_every_token() -> None:
    plan = plan_batch([1234, 30, 801], CONFIG)
    flat = plan.window_index.reshape(-1)
    assert torch.equal(flat[plan.token_slot], torch.arange(plan.num_tokens))
    assert int(plan.window_valid.sum()) == plan.num_tokens


def test_full_windows_need_no_mask() -> None:
    assert plan_batch([800, 1600], CONFIG).window_valid is None


def test_launches_are_bounded_and_tile_the_tokens() -> None:
    plan = plan_batch([60000] + [200] * 7, CONFIG, chunks_per_launch=64)
    assert sum(launch.num_chunks for launch in plan.launches) == 600 + 14
    assert max(launch.num_chunks for launch in plan.launches) == 64
    offset = 0
    for launch in plan.launches:
        assert launch.row_offset == offset
        offset += launch.num_rows
    assert offset == plan.num_tokens == 7800 + 7 * 26


def test_long_clip_tails_pad_to_a_full_chunk_without_masks() -> None:
    plan = plan_batch([1234, 250], CONFIG)
    (launch,) = plan.launches
    assert launch.pad_frames == 100 and launch.masks is None
    assert launch.num_rows == audio_token_count(1234) + audio_token_count(250)
    # the tail chunk of 34 frames reads zeros (index = total frames) past its end
    index = launch.frame_index.view(-1, 100)
    assert index[12, 33].item() == 1233 and index[12, 34].item() == 1484


def test_short_clips_are_masked_to_their_own_length() -> None:
    plan = plan_batch([30, 1000, 57], CONFIG)
    (launch,) = plan.launches
    assert launch.masks is not None
    first, second = launch.masks
    assert first.shape == (12, 50) and second.shape == (12, 25)
    assert first[0].sum() == 15 and second[0].sum() == 8  # ceil(30/2), ceil(30/4)
    assert first[1:11].min() == 1  # full chunks untouched
    assert first[11].sum() == 29 and second[11].sum() == 15  # ceil(57/2), ceil(57/4)


def test_short_clips_alone_still_pad_to_a_full_chunk() -> None:
    """One conv shape for every launch: a lone short clip is convolved as in any batch (and as its CUDA graph)."""
    (launch,) = plan_batch([30, 57], CONFIG).launches
    assert launch.pad_frames == 100 and launch.stem_tokens == 13 and launch.num_rows == 4 + 8
    assert launch.masks[0].sum(1).tolist() == [15, 29]


def test_plan_moves_to_a_device_and_dtype() -> None:
    plan = plan_batch([30, 1000], CONFIG).to("cpu", torch.float16)
    assert plan.launches[0].masks[0].dtype == torch.float16


@pytest.mark.parametrize("counts,message", [([], "at least one clip"), ([100, 0], "at least one mel frame")])
def test_bad_frame_counts_raise(counts: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_batch(counts, CONFIG)


def test_bad_launch_size_raises() -> None:
    with pytest.raises(ValueError, match="chunks_per_launch"):
        plan_batch([100], CONFIG, chunks_per_launch=0)


@pytest.mark.parametrize("counts,other", [([500], [401]), ([401, 1234], [500, 1201]), ([30, 800, 99], [1, 701, 57]),
                                          ([7], [99])])
def test_bucketed_plan_shapes_follow_the_bucket_alone(counts: list[int], other: list[int]) -> None:
    """Every clip length of a bucket gives tensors of the same shapes and the same host ints (a graph's inputs)."""
    key = bucket_key(counts, 100)
    assert bucket_key(other, 100) == key
    a, b = plan_bucketed(counts, CONFIG), plan_bucketed(other, CONFIG)
    assert [t.shape for t in a.tensors(torch.float16)] == [t.shape for t in b.tensors(torch.float16)]
    assert [t.dtype for t in a.tensors(torch.float16)] == [t.dtype for t in b.tensors(torch.float16)]

    def host_ints(p) -> tuple:  # type: ignore[no-untyped-def]
        return p.max_window, p.zero_frame, p.num_rows, [(x.num_chunks, x.pad_frames) for x in p.launches]

    assert host_ints(a) == host_ints(b)
    assert a.zero_frame == 100 * bucket_chunks(key)


def test_bucket_key_counts_chunks_and_marks_short_clips() -> None:
    assert bucket_key([500, 401, 100, 99, 1, 6001], 100) == (5, 5, 1, 0, 0, 61)
    assert bucket_chunks((5, 0, 0)) == 7


def test_bucketed_plan_puts_tokens_first_and_padding_in_its_own_window() -> None:
    plan = plan_bucketed([1234, 30], CONFIG)
    (launch,) = plan.launches
    assert plan.num_tokens == 161 + 4 and plan.num_rows == 14 * 13 + 1  # every stem row, plus row 0 again
    rows = launch.token_index
    # the long clip's tokens: 12 full chunks then 5 of the tail chunk's 13 rows; then the short clip's first 4 rows
    assert rows[:161].tolist() == list(range(156)) + list(range(156, 161))
    assert rows[161:165].tolist() == [169, 170, 171, 172]
    assert sorted(rows[:-1].tolist()) == list(range(14 * 13)) and rows[-1] == 0
    assert window_lengths(plan) == [104, 57, 4, plan.num_rows - plan.num_tokens]
    assert launch.masks is not None and launch.masks[0][13].sum() == 15  # the 30-frame clip, ceil(30 / 2)
    assert launch.masks[0][:13].min() == 1


def test_bucketed_plan_without_short_clips_has_no_masks() -> None:
    plan = plan_bucketed([500], CONFIG)
    assert plan.launches[0].masks is None and plan.window_valid is not None
    assert window_lengths(plan) == [65, 1]  # a full tail chunk: only the extra row pads

"""GPU: the one-launch code pick (pick_triton) against the torch path it replaces (`_Picker` in "topk" mode), eager
and replayed from a CUDA graph.

Both paths use the same expf (libdevice's) and round every division to nearest; they differ only in the order of
their float sums, so on tie-free scores the picks must be equal row for row.
"""
from __future__ import annotations

import pytest
import torch

from services.talker.model.frame_step import DO_SAMPLE, TOP_WIDTH, _Picker
from tests.unit.talker.test_pick_triton import COLUMNS, assert_same_picks, mixed_case, picks, tie_case

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("vocab", "suppress", "strided", "crowded"), [
    (2048, False, True, False), (3072, True, False, False), (3072, False, False, True), (777, False, False, False),
])  # fmt: skip
def test_picks_equal_the_torch_path(vocab: int, suppress: bool, strided: bool, crowded: bool, seed: int) -> None:
    """27 rows (every setting twice, 3 greedy), tie-free fp32 scores: the predictor's codebooks (exponentials a
    strided slice), the talker's codebook 0 with its control ids suppressed, scores that make the kernel sort the
    whole row, an odd vocabulary."""
    pytest.importorskip("triton")
    assert_same_picks(mixed_case(vocab, seed, "cuda", suppress, strided, repeats=2, crowded=crowded))


def test_narrow_vocabulary_equals_the_full_mode() -> None:
    """Fewer ids than the width (torch.topk(width) cannot run there): the full-vocabulary warp and race."""
    pytest.importorskip("triton")
    assert_same_picks(mixed_case(37, 5, "cuda"), mode="full")


def test_greedy_frame_is_the_argmax() -> None:
    pytest.importorskip("triton")
    from services.talker.model.pick_triton import pick_codes

    logits = mixed_case(3072, 6, "cuda").logits
    assert torch.equal(pick_codes(logits, None, None), logits.argmax(dim=-1))


def test_exact_ties_follow_the_documented_order() -> None:
    pytest.importorskip("triton")
    case, codes = tie_case("cuda")
    assert picks(case)[1].tolist() == codes


@pytest.mark.parametrize("vocab", [2048, 3072])
def test_bf16_scores_with_ties_match_torch(vocab: int) -> None:
    """bf16-rounded scores, as the talker's heads give them: many exact ties. The picks still agree where torch's
    CUDA top-k puts equal scores in index order (its gather walks the row in order and its small sort is stable),
    which is the kernel's order; a failure here means only that torch orders ties differently."""
    pytest.importorskip("triton")
    for seed in range(4):
        case = mixed_case(vocab, 10 + seed, "cuda", suppress=vocab == 3072, repeats=2)
        case = case._replace(logits=case.logits.bfloat16().float())
        want, got = picks(case)
        assert torch.equal(got, want), (seed, got, want)


def test_cuda_graph_replay_equals_the_torch_path() -> None:
    """The pick captured once (its knobs built outside the graph, once per frame) and replayed on new scores and
    exponentials copied into the captured buffers."""
    pytest.importorskip("triton")
    from services.talker.model.pick_triton import RowKnobs, pick_codes

    case = mixed_case(3072, 20, "cuda", suppress=True, repeats=2)
    knobs = case.knobs
    rows = RowKnobs.build(knobs[:, DO_SAMPLE] > 0, *(knobs[:, c] for c in COLUMNS), TOP_WIDTH)
    logits, exps = case.logits.clone(), case.exps.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        pick_codes(logits, exps, rows)  # warm-up: compiles off the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = pick_codes(logits, exps, rows)
    torch_pick = _Picker.build(knobs, COLUMNS, "topk", kernel=False)
    for seed in range(21, 25):
        fresh = mixed_case(3072, seed, "cuda", suppress=True, repeats=2)
        logits.copy_(fresh.logits)
        exps.copy_(fresh.exps)
        graph.replay()
        assert torch.equal(captured, torch_pick(fresh.logits, fresh.exps)), seed


def test_frames_on_cuda_pick_through_the_kernel() -> None:
    """`_Picker.build` on CUDA knobs takes the kernel by default, and it picks what the torch path picks."""
    pytest.importorskip("triton")
    case = mixed_case(2048, 31, "cuda")
    auto = _Picker.build(case.knobs, COLUMNS, "topk")
    assert auto.rows is not None and auto.top is None
    assert torch.equal(auto(case.logits, case.exps), _Picker.build(case.knobs, COLUMNS, "topk", kernel=False)(
        case.logits, case.exps))

"""The sampler's kernel (runtime/sampler/pick_triton.py) against its torch reference (runtime/sampler/rules.py): in
Triton's interpreter on CPU, compiled for sm_90 (H100/H200) without spills through Triton's compiler and the bundled
ptxas, and on the GPU (`gpu` marker), eager and replayed from a CUDA graph.

Both forms of a row are checked: a whole vocabulary (the talker's 3,072 ids with its control ids suppressed, the
predictor's 2,048 with uniforms a strided slice of a frame's, an odd 777, scores crowding few of the kernel's
groups) and candidates with their ids (the thinker's 152,064-id vocabulary, widths 64 and 40). Where a row's width + 1
best scores hold no exact tie both paths agree on the candidates and differ only in the order of their float sums,
so the picks must be equal row for row (see pick_triton's docstring for the rounding caveat); the documented order
on exact ties is checked on its own.

The interpreter and compile checks run this file as a script in a fresh process (TRITON_INTERPRET is read when
triton is first imported).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import torch  # importing torch leaves triton unimported, so the script can still set TRITON_INTERPRET first

from runtime.sampler.knobs import WIDTH, RowKnobs
from runtime.sampler.rules import draw_among, pick_reference
from tests.triton_scripts import assert_script_passes

HERE = Path(__file__).resolve()
# every drawing row's (top_k, top_p, min_p): k from one to the width, p from none to "the best token only" (1 - 1e-9
# is 1 in float32: every cumulative mass is <= it, and only the rule that the best always stays keeps a token)
SETTINGS = [(k, p, 0.0) for k in (1, 50, WIDTH) for p in (1.0, 0.8, 0.3, 1e-9)] + [(20, 0.8, 0.05), (WIDTH, 1.0, 0.1)]
GREEDY_ROWS = 3
SUPPRESSED = 1024  # the talker's top control ids, masked to -inf but for codec EOS (as FrameStep does)
THINKER_VOCAB = 152064


def test_the_kernel_picks_the_reference_tokens_in_the_interpreter() -> None:
    assert_script_passes(HERE, "interpret", interpret=True, timeout=400)


def test_the_kernel_compiles_for_sm90_without_spills() -> None:
    assert_script_passes(HERE, "compile", interpret=False, timeout=300)


class PickCase(NamedTuple):
    logits: torch.Tensor  # (B, V) fp32
    uniforms: torch.Tensor  # (B, V) fp32, possibly a strided slice
    knobs: RowKnobs


def mixed_case(vocab: int, seed: int, device: str = "cpu", suppress: bool = False, strided: bool = False,
               repeats: int = 1, crowded: bool = False) -> PickCase:  # fmt: skip
    """Every SETTINGS row `repeats` times plus greedy rows, shuffled, temperatures 0.5..1.5, no ties among the best
    scores.

    `crowded`: the best scores all in 32 of the kernel's 128 groups (index mod 128), so more than its 128 candidates
    reach the floor its group maxima set, and it sorts the whole row."""
    gen = torch.Generator().manual_seed(seed)
    settings = SETTINGS * repeats + [None] * GREEDY_ROWS
    rows = len(settings)
    sample, top_k, top_p, min_p = torch.zeros(rows), torch.ones(rows), torch.ones(rows), torch.zeros(rows)
    for r, i in enumerate(torch.randperm(rows, generator=gen).tolist()):
        if settings[i] is not None:
            sample[r] = 1.0
            top_k[r], top_p[r], min_p[r] = settings[i]
    temperature = torch.rand(rows, generator=gen) + 0.5
    logits = (torch.randn(rows, vocab, generator=gen, dtype=torch.float64) * 3).float()  # fp32 randn repeats values
    if crowded:  # the row's best scores moved (shuffled) into the crowded groups, the rest into the others
        crowd = torch.arange(vocab) % 128 < 32
        ordered = logits.sort(dim=-1, descending=True).values
        size = int(crowd.sum())
        logits[:, crowd] = ordered[:, torch.randperm(size, generator=gen)]
        logits[:, ~crowd] = ordered[:, size + torch.randperm(vocab - size, generator=gen)]
    if suppress:
        logits[:, vocab - SUPPRESSED:] = float("-inf")
        logits[:, vocab - SUPPRESSED + 102] = 1.0  # codec EOS stays
    best = logits.topk(min(WIDTH + 1, vocab), dim=-1).values
    assert not ((best[:, 1:] == best[:, :-1]) & best[:, 1:].isfinite()).any(), "the best scores must not tie"
    noise = torch.rand(rows, 4 if strided else 1, vocab, generator=gen).to(device)
    knobs = RowKnobs.build(*(t.to(device) for t in (sample, temperature, top_k, top_p, min_p)))
    # strided: a codebook's slice of a frame's (B, G-1, V), as the predictor reads it
    return PickCase(logits.to(device), noise[:, -1], knobs)


def tie_case(device: str = "cpu") -> tuple[PickCase, list[int]]:
    """Rows with exact ties and the codes the kernel's order (score descending, id ascending) gives them."""
    vocab, rows = 300, 6
    logits = torch.linspace(-8, -2, vocab).repeat(rows, 1)  # distinct, far below the tied scores
    exps = torch.ones(rows, vocab)  # the race's exponentials wanted; the uniforms are exp(-exps)
    sample, top_k, top_p = torch.ones(rows), torch.full((rows,), 50.0), torch.ones(rows)
    sample[0] = 0.0  # greedy: best tied at 5 and 9 -> the lower id
    logits[0, [5, 9]] = 4.0
    top_k[1] = 1  # top-k keeps both scores equal to the k-th: 9's small exponential wins
    logits[1, [5, 9]] = 4.0
    exps[1, 9] = 0.01
    top_p[2] = 0.5  # three ways tied at ~1/3 each: top-p drops the highest id (9) first, then 5 wins
    logits[2, [2, 5, 9]] = 10.0
    exps[2, [2, 5, 9]] = torch.tensor([0.9, 0.5, 0.01])
    top_k[3] = 1  # all equal: the width lowest ids are the candidates, so 100 is out and 40 wins
    logits[3] = 0.0
    exps[3, [40, 100]] = torch.tensor([0.01, 0.001])
    logits[4, [5, 9]] = 4.0  # equal probabilities over equal exponentials: the race's tie goes to the lower id
    exps[4, [5, 9]] = 0.01
    top_p[5] = 0.75  # four ways tied, the rest -inf: 11's mass (exactly 0.25) is <= 1 - 0.75, so it drops
    logits[5] = float("-inf")
    logits[5, [2, 5, 9, 11]] = 1.0
    exps[5, [9, 11]] = torch.tensor([0.5, 0.01])
    knobs = RowKnobs.build(*(t.to(device) for t in (sample, torch.ones(rows), top_k, top_p)))
    return PickCase(logits.to(device), torch.exp(-exps).to(device), knobs), [5, 9, 5, 40, 5, 9]


def candidate_case(rows: int, width: int, seed: int, device: str = "cpu"
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, RowKnobs]:  # fmt: skip
    """The thinker's form: a descending top-`width` of a 152,064-id vocabulary's scores (a run of ties inside each
    row, -inf at the tail of some), their ids, the rows' uniforms over the vocabulary and their settings (top_k 0
    is clamped to the width)."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(rows, width, generator=gen) * 2
    values[:, 5:9] = values[:, 5:6]
    values[rows // 2:, width - 3:] = float("-inf")
    values = values.sort(dim=-1, descending=True).values
    ids = torch.stack([torch.randperm(THINKER_VOCAB, generator=gen)[:width] for _ in range(rows)])
    top_k = torch.randint(1, width + 1, (rows,), generator=gen).float()
    top_k[::4] = 0
    top_p = torch.rand(rows, generator=gen) * 0.9 + 0.1
    top_p[1::3] = 1.0
    min_p = torch.rand(rows, generator=gen) * 0.2
    min_p[::2] = 0.0
    temperature = torch.rand(rows, generator=gen) + 0.5
    uniforms = torch.rand(rows, THINKER_VOCAB, generator=gen)
    knobs = RowKnobs.build(*(t.to(device) for t in (torch.ones(rows), temperature, top_k, top_p, min_p)))
    return values.to(device), ids.to(device), uniforms.to(device), knobs


def picks(case: PickCase) -> tuple[torch.Tensor, torch.Tensor]:
    """(the reference's tokens, the kernel's) for a whole-vocabulary case."""
    from runtime.sampler.pick_triton import pick_triton

    return pick_reference(case.logits, case.uniforms, case.knobs), pick_triton(case.logits, case.uniforms, case.knobs)


def assert_same_picks(case: PickCase) -> None:
    want, got = picks(case)
    assert torch.equal(got, want), (got, want)
    drawing = case.knobs.sample
    assert torch.equal(got[~drawing], case.logits[~drawing].argmax(dim=-1))
    assert (got[drawing] != case.logits[drawing].argmax(dim=-1)).any(), "no row drew anything but its argmax"


def candidate_picks(rows: int, width: int, seed: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    from runtime.sampler.pick_triton import pick_triton

    values, ids, uniforms, knobs = candidate_case(rows, width, seed, device)
    return draw_among(values, ids, uniforms, knobs), pick_triton(values, uniforms, knobs, ids=ids)


def test_the_reference_keeps_only_the_best_at_top_k_one() -> None:
    values, ids, uniforms, knobs = candidate_case(32, WIDTH, seed=7)
    ones = RowKnobs.build(knobs.sample.float(), knobs.table[:, 1], torch.ones(32), torch.ones(32))
    assert torch.equal(draw_among(values, ids, uniforms, ones), ids[:, 0])  # descending, no tie at the top


# --- GPU ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("vocab", "suppress", "strided", "crowded"), [
    (2048, False, True, False), (3072, True, False, False), (3072, False, False, True), (777, False, False, False),
])  # fmt: skip
@pytest.mark.gpu
def test_gpu_picks_equal_the_reference(vocab: int, suppress: bool, strided: bool, crowded: bool, seed: int) -> None:
    pytest.importorskip("triton")
    assert_same_picks(mixed_case(vocab, seed, "cuda", suppress, strided, repeats=2, crowded=crowded))


@pytest.mark.gpu
def test_gpu_candidates_draw_the_reference_tokens() -> None:
    """The thinker's form at its vocabulary, 1 to 300 rows; the rows' tied runs may put a top-p mass within
    rounding of its floor, so only float-rounding near-ties may differ."""
    pytest.importorskip("triton")
    for rows, width, seed in ((1, WIDTH, 1), (32, WIDTH, 2), (300, WIDTH, 3), (9, 40, 4)):
        want, got = candidate_picks(rows, width, seed, "cuda")
        assert (got == want).float().mean() >= 0.99, (rows, width)


@pytest.mark.gpu
def test_gpu_exact_ties_follow_the_documented_order() -> None:
    pytest.importorskip("triton")
    case, codes = tie_case("cuda")
    assert picks(case)[1].tolist() == codes


@pytest.mark.parametrize("vocab", [2048, 3072])
@pytest.mark.gpu
def test_gpu_bf16_scores_with_ties_match_the_reference(vocab: int) -> None:
    """bf16-rounded scores, as the heads give them: many exact ties. The picks still agree where torch's CUDA
    top-k puts equal scores in id order (its gather walks the row in order and its small sort is stable), which is
    the kernel's; a failure here means only that torch orders ties differently."""
    pytest.importorskip("triton")
    for seed in range(4):
        case = mixed_case(vocab, 10 + seed, "cuda", suppress=vocab == 3072, repeats=2)
        case = case._replace(logits=case.logits.bfloat16().float())
        want, got = picks(case)
        assert torch.equal(got, want), (seed, got, want)


@pytest.mark.gpu
def test_gpu_cuda_graph_replay_equals_the_reference() -> None:
    """The pick captured once (its knobs built outside the graph, as a frame's are) and replayed on new scores and
    uniforms copied into the captured buffers."""
    pytest.importorskip("triton")
    from runtime.sampler.pick_triton import pick_triton

    case = mixed_case(3072, 20, "cuda", suppress=True, repeats=2)
    logits, uniforms = case.logits.clone(), case.uniforms.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        pick_triton(logits, uniforms, case.knobs)  # warm-up: compiles off the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = pick_triton(logits, uniforms, case.knobs)
    for seed in range(21, 25):
        fresh = mixed_case(3072, seed, "cuda", suppress=True, repeats=2)
        logits.copy_(fresh.logits)
        uniforms.copy_(fresh.uniforms)
        graph.replay()
        assert torch.equal(captured, pick_reference(fresh.logits, fresh.uniforms, case.knobs)), seed


@pytest.mark.gpu
def test_gpu_pick_takes_the_kernel_for_both_forms() -> None:
    """`pick` on CUDA runs the kernel: whole rows at the talker's vocabularies, torch.topk then candidates at the
    thinker's; both draw the reference's tokens."""
    pytest.importorskip("triton")
    from runtime.sampler.pick import pick

    for vocab in (2048, THINKER_VOCAB):
        gen = torch.Generator().manual_seed(vocab)
        logits = (torch.randn(16, vocab, generator=gen, dtype=torch.float64) * 3).float().cuda()
        uniforms = torch.rand(16, vocab, generator=gen).cuda()
        ones = torch.ones(16, device="cuda")
        knobs = RowKnobs.build(ones, ones * 0.8, ones * 20, ones * 0.9, ones * 0.02)
        assert torch.equal(pick(logits, uniforms, knobs), pick(logits, uniforms, knobs, kernel=False)), vocab


# --- the script side ---------------------------------------------------------------------------------------------

def _interpret() -> None:
    from tests.unit.kernels.interpreter_check import patch_numpy_scalars

    patch_numpy_scalars()
    torch.set_num_threads(1)
    strided = mixed_case(2048, seed=0, strided=True)  # a predictor codebook
    assert strided.uniforms.stride(0) == 4 * 2048
    assert_same_picks(strided)
    assert_same_picks(mixed_case(3072, seed=1, suppress=True))  # the talker's codebook 0
    assert_same_picks(mixed_case(777, seed=2))  # odd: a partial block
    assert_same_picks(mixed_case(3072, seed=5, crowded=True))
    assert_same_picks(mixed_case(37, seed=3))  # narrower than the width: padding lanes among the candidates
    ties, codes = tie_case()
    assert picks(ties)[1].tolist() == codes
    for rows, width, seed in ((16, WIDTH, 1), (8, 40, 3), (1, WIDTH, 4)):
        want, got = candidate_picks(rows, width, seed)
        assert torch.equal(got, want), (rows, width, got, want)


def _compile() -> None:
    from tests.unit.kernels.compile_check import assert_no_spills, install

    install()
    from runtime.sampler.pick_triton import pick_triton

    for vocab in (2048, 3072, 4096):  # the predictor's codebooks, the talker's, pick's largest whole row
        logits = torch.zeros(2, vocab)
        pick_triton(logits, logits, RowKnobs(torch.zeros(2, 5), WIDTH))
    for width in (WIDTH, 40):  # the thinker's candidates
        values = torch.zeros(2, width)
        pick_triton(values, torch.zeros(2, 1000), RowKnobs(torch.zeros(2, 5), WIDTH), ids=torch.zeros(2, width).long())
    assert_no_spills()


if __name__ == "__main__":
    {"interpret": _interpret, "compile": _compile}[sys.argv[1]]()
    print(f"sampler kernel: {sys.argv[1]} checks passed")

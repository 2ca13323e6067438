"""The talker's one-launch code pick (pick_triton) on CPU: its picks in Triton's interpreter against the torch path it
replaces (`_Picker` in "topk" mode, "full" mode where the vocabulary is narrower than the width), its documented
order on exact ties, and its compilation for sm_90 (H100/H200) through Triton's compiler and the bundled ptxas.

Each check runs this file as a script in a fresh process, because TRITON_INTERPRET must be set (or unset) before
triton is imported. Where a row's width + 1 best scores hold no exact tie the two paths agree on the candidates and
differ only in the order of their float sums, so the picks must be equal row for row (see pick_triton's docstring
for the rounding caveat).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import torch  # importing torch leaves triton unimported, so the script can still set TRITON_INTERPRET first

from services.talker.model.frame_step import DO_SAMPLE, NUM_KNOBS, TEMPERATURE, TOP_K, TOP_P, TOP_WIDTH, _Picker
from services.talker.model.sampling import exponentials
from tests.triton_scripts import assert_script_passes
from tests.unit.kernels.kernel_data import self_check_main

HERE = Path(__file__).resolve()
COLUMNS = (TEMPERATURE, TOP_K, TOP_P)
# every sampling row's (top_k, top_p): k from one to the width, p from none to "the best token only" (1 - 1e-9 is 1 in
# float32: every cumulative mass is <= it, and only the rule that the best always stays keeps a token)
SETTINGS = [(k, p) for k in (1, 50, TOP_WIDTH) for p in (1.0, 0.8, 0.3, 1e-9)]
GREEDY_ROWS = 3
SUPPRESSED = 1024  # the talker's top control ids, masked to -inf but for codec EOS (as FrameStep does)


def test_pick_kernel_matches_the_torch_path_in_the_interpreter() -> None:
    assert_script_passes(HERE, "interpret", interpret=True, timeout=120)


def test_pick_kernel_compiles_for_sm90_without_spills() -> None:
    assert_script_passes(HERE, "compile", interpret=False, timeout=180)


class PickCase(NamedTuple):
    logits: torch.Tensor  # (B, V) fp32
    exps: torch.Tensor  # (B, V) fp32, possibly a strided slice
    knobs: torch.Tensor  # (B, NUM_KNOBS) as FrameInputs.knobs holds them


def mixed_case(vocab: int, seed: int, device: str = "cpu", suppress: bool = False, strided: bool = False,
               repeats: int = 1, crowded: bool = False) -> PickCase:  # fmt: skip
    """Every SETTINGS row `repeats` times plus greedy rows, shuffled, temperatures 0.5..1.5, no ties among the best
    scores.

    `crowded`: the best scores all in 32 of the kernel's 128 groups (index mod 128), so more than its 128 candidates
    reach the floor its group maxima set, and it sorts the whole row."""
    gen = torch.Generator().manual_seed(seed)
    settings = SETTINGS * repeats + [None] * GREEDY_ROWS
    rows = len(settings)
    knobs = torch.zeros(rows, NUM_KNOBS)
    for r, i in enumerate(torch.randperm(rows, generator=gen).tolist()):
        if settings[i] is not None:
            knobs[r, DO_SAMPLE] = 1.0
            knobs[r, TOP_K], knobs[r, TOP_P] = settings[i]
    knobs[:, TEMPERATURE] = torch.rand(rows, generator=gen) + 0.5
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
    best = logits.topk(min(TOP_WIDTH + 1, vocab), dim=-1).values
    assert not ((best[:, 1:] == best[:, :-1]) & best[:, 1:].isfinite()).any(), "the best scores must not tie"
    noise = torch.rand(rows, 4 if strided else 1, vocab, generator=gen).to(device)
    exps = exponentials(noise)[:, -1]  # strided: a codebook's slice of a frame's (B, G-1, V), as the predictor reads
    return PickCase(logits.to(device), exps, knobs.to(device))


def tie_case(device: str = "cpu") -> tuple[PickCase, list[int]]:
    """Rows with exact ties and the codes the kernel's order (score descending, index ascending) gives them."""
    vocab, rows = 300, 6
    logits = torch.linspace(-8, -2, vocab).repeat(rows, 1)  # distinct, far below the tied scores
    exps = torch.ones(rows, vocab)
    knobs = torch.zeros(rows, NUM_KNOBS)
    knobs[:, DO_SAMPLE], knobs[:, TEMPERATURE], knobs[:, TOP_K], knobs[:, TOP_P] = 1.0, 1.0, 50, 1.0
    knobs[0, DO_SAMPLE] = 0.0  # greedy: best tied at 5 and 9 -> the first index
    logits[0, [5, 9]] = 4.0
    knobs[1, TOP_K] = 1  # top-k keeps both scores equal to the k-th: 9's small exponential wins
    logits[1, [5, 9]] = 4.0
    exps[1, 9] = 0.01
    knobs[2, TOP_P] = 0.5  # three ways tied at ~1/3 each: top-p drops the highest index (9) first, then 5 wins
    logits[2, [2, 5, 9]] = 10.0
    exps[2, [2, 5, 9]] = torch.tensor([0.9, 0.5, 0.01])
    knobs[3, TOP_K] = 1  # all equal: the width lowest indices are the candidates, so 100 is out and 40 wins
    logits[3] = 0.0
    exps[3, [40, 100]] = torch.tensor([0.01, 0.001])
    logits[4, [5, 9]] = 4.0  # equal probabilities over equal exponentials: the race's tie goes to the lower index
    exps[4, [5, 9]] = 0.01
    knobs[5, TOP_P] = 0.75  # four ways tied, the rest -inf: 11's mass (exactly 0.25) is <= 1 - 0.75, so it drops
    logits[5] = float("-inf")
    logits[5, [2, 5, 9, 11]] = 1.0
    exps[5, [9, 11]] = torch.tensor([0.5, 0.01])
    return PickCase(logits.to(device), exps.to(device), knobs.to(device)), [5, 9, 5, 40, 5, 9]


def picks(case: PickCase, mode: str = "topk") -> tuple[torch.Tensor, torch.Tensor]:
    """(the torch path's codes, the kernel's codes) for one case."""
    from services.talker.model.pick_triton import RowKnobs, pick_codes

    knobs = case.knobs
    want = _Picker.build(knobs, COLUMNS, mode, kernel=False)(case.logits, case.exps)  # type: ignore[arg-type]
    rows = RowKnobs.build(knobs[:, DO_SAMPLE] > 0, *(knobs[:, c] for c in COLUMNS), TOP_WIDTH)
    return want, pick_codes(case.logits, case.exps, rows)


def assert_same_picks(case: PickCase, mode: str = "topk") -> None:
    want, got = picks(case, mode)
    assert torch.equal(got, want), (got, want)
    drawing = case.knobs[:, DO_SAMPLE] > 0
    assert torch.equal(got[~drawing], case.logits[~drawing].argmax(dim=-1))
    assert (got[drawing] != case.logits[drawing].argmax(dim=-1)).any(), "no row drew anything but its argmax"


def check_interpreted() -> None:
    from services.talker.model.pick_triton import pick_codes

    strided = mixed_case(2048, seed=0, strided=True)  # a predictor codebook
    assert strided.exps.stride(0) == 4 * 2048
    assert_same_picks(strided)
    assert_same_picks(mixed_case(3072, seed=1, suppress=True))  # the talker's codebook 0
    assert_same_picks(mixed_case(777, seed=2))  # odd: a partial block
    assert_same_picks(mixed_case(3072, seed=5, crowded=True))
    assert_same_picks(mixed_case(37, seed=3), mode="full")  # narrower than the width: torch.topk(64) cannot run
    case = mixed_case(3072, seed=4)
    assert torch.equal(pick_codes(case.logits, None, None), case.logits.argmax(dim=-1))  # a greedy frame
    ties, codes = tie_case()
    assert picks(ties)[1].tolist() == codes


def compile_for_sm90() -> None:
    from tests.unit.kernels.compile_check import assert_no_spills, install

    install()
    from services.talker.model.pick_triton import RowKnobs, pick_codes

    for vocab in (2048, 3072):  # the predictor's codebooks, the talker's
        logits = torch.zeros(2, vocab)
        pick_codes(logits, logits, RowKnobs(torch.zeros(2, 4), TOP_WIDTH))
        pick_codes(logits, None, None)
    assert_no_spills()


if __name__ == "__main__":  # the kernel takes fp32 logits only: one interpreter pass
    self_check_main(sys.argv[1], lambda _: check_interpreted(), compile_for_sm90, "pick kernel", (torch.float32,))

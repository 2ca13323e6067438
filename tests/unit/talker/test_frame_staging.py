"""FrameStaging: a frame's inputs from the rows' host values and their slots' sampling settings, as the runner
built them with one torch.tensor per field."""
from __future__ import annotations

import itertools

import torch

from services.talker.model.frame_staging import FrameStaging
from services.talker.model.frame_step import frame_mode, knob_row
from services.talker.model.sampling import GREEDY, TalkerSampling

SAMPLINGS = [GREEDY, TalkerSampling(seed=1), TalkerSampling(top_k=0, temperature=0.7), TalkerSampling(top_p=0.5)]


def test_inputs_are_the_rows_values_and_their_slots_knobs() -> None:
    staging = FrameStaging(max_rows=4, num_slots=6, device=torch.device("cpu"))
    for slot, sampling in zip((5, 0, 3), SAMPLINGS):
        staging.set_sampling(slot, sampling)
    noise = torch.rand(3, 7)
    inp = staging.inputs([151, 9, 152063], [5, 0, 3], [40, 7, 12], [33.0, 8.5, 17.0], noise, None)
    assert inp.text_ids.tolist() == [151, 9, 152063] and inp.text_ids.dtype == torch.long
    assert inp.slots.tolist() == [5, 0, 3] and inp.cache_len.tolist() == [40, 7, 12]
    assert torch.equal(inp.positions, torch.tensor([33.0, 8.5, 17.0]))
    assert torch.equal(inp.knobs, torch.tensor([knob_row(s) for s in SAMPLINGS[:3]]))
    assert inp.talker_noise is noise and inp.predictor_noise is None


def test_a_slot_takes_its_new_rows_settings_and_fewer_rows_reuse_the_buffers() -> None:
    staging = FrameStaging(max_rows=4, num_slots=4, device=torch.device("cpu"))
    staging.set_sampling(2, SAMPLINGS[1])
    staging.inputs([1, 2], [2, 1], [3, 4], [5.0, 6.0], None, None)
    staging.set_sampling(2, SAMPLINGS[3])  # the slot's row ended; a new request holds it
    inp = staging.inputs([7], [2], [8], [9.0], None, None)
    assert inp.text_ids.tolist() == [7] and inp.cache_len.tolist() == [8] and inp.positions.tolist() == [9.0]
    assert torch.equal(inp.knobs, torch.tensor([knob_row(SAMPLINGS[3])]))


def test_mode_is_frame_mode_of_the_rows_samplings() -> None:
    staging = FrameStaging(max_rows=3, num_slots=len(SAMPLINGS), device=torch.device("cpu"))
    for slot, sampling in enumerate(SAMPLINGS):
        staging.set_sampling(slot, sampling)
    for slots in itertools.chain.from_iterable(itertools.combinations(range(len(SAMPLINGS)), n) for n in (1, 2, 3)):
        assert staging.mode(slots) == frame_mode(SAMPLINGS[s] for s in slots), slots

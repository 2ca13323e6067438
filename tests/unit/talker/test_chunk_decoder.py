"""ChunkDecoder: a launch's samples are what decode_streams gives the same streams, collected once; launches queue up
to `max_in_flight` and come back in launch order, a decode still running holding back the ones after it."""
from __future__ import annotations

import copy

import pytest
import torch

from services.talker.chunk_decoder import ChunkDecoder
from services.talker.job import SpeechJob
from services.talker.model.code2wav import Code2Wav
from services.talker.model.code2wav_stream import StreamingCode2Wav, decode_streams
from services.talker.model.load import TalkerModel
from services.talker.model.prompt import SpeechPrompt
from services.talker.model.sampling import GREEDY
from services.talker.request import SpeakInput
from tests.unit.talker.talker_tiny import tiny_talker


@pytest.fixture(scope="module")
def model() -> TalkerModel:
    return tiny_talker()


def _streams(code2wav: Code2Wav, groups: int, frames: list[int], seed: int = 0) -> list[StreamingCode2Wav]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for n in frames:
        s = StreamingCode2Wav(code2wav, first_chunk=2, chunk=3, left_context=2)
        s.push(torch.randint(0, code2wav.cfg.codebook_size, (groups, n), generator=gen))
        out.append(s)
    return out


def _job(job_id: int, stream: StreamingCode2Wav) -> SpeechJob:
    inp = SpeakInput("r", SpeechPrompt([1, 2], "ethan"), GREEDY, 16, return_codes=False)
    return SpeechJob(job_id, inp, stream)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_collected_samples_are_decode_streams_output(model: TalkerModel, device: str) -> None:
    """On CUDA the launch runs on the side stream; the reference decodes the same codes on the main stream."""
    code2wav = copy.deepcopy(model.code2wav).to(device)
    groups, frames = model.cfg.code_predictor.num_code_groups, [5, 2, 1]  # two chunks, one, nothing ready
    jobs = [_job(i, s) for i, s in enumerate(_streams(code2wav, groups, frames))]
    expected = decode_streams(code2wav, _streams(code2wav, groups, frames), False)
    decoder = ChunkDecoder(code2wav)
    assert not decoder.busy and decoder.collect() == []
    decoder.launch(jobs, [False] * len(jobs))
    assert decoder.busy and all(decoder.holds(j) for j in jobs)
    collected = decoder.collect(wait=True)
    assert not decoder.busy and not decoder.holds(jobs[0])
    assert [job for job, _ in collected] == jobs
    for (_, wav), parts in zip(collected, expected):
        if not parts:
            assert wav is None
        else:
            torch.testing.assert_close(wav, torch.cat(parts).float().cpu(), rtol=0, atol=0)
    assert jobs[0].stream.decoded_frames == 5 and jobs[2].stream.decoded_frames == 0


class _Running:
    """A CUDA event's two calls, for a decode that the test says is still running (CPU decodes finish at launch)."""

    def __init__(self) -> None:
        self.finished = False

    def query(self) -> bool:
        return self.finished

    def synchronize(self) -> None:
        self.finished = True


def test_flights_come_back_in_launch_order(model: TalkerModel) -> None:
    """A running decode holds back the finished ones launched after it (each stream's chunks go out in order) until
    it ends or the engine waits for it; with `max_in_flight` in flight the next collect waits for the oldest, so the
    launch after it has room."""
    code2wav = model.code2wav
    groups = model.cfg.code_predictor.num_code_groups
    decoder = ChunkDecoder(code2wav, max_in_flight=4)
    jobs = [_job(i, s) for i, s in enumerate(_streams(code2wav, groups, [3] * 5))]
    for job in jobs[:4]:
        decoder.launch([job], [False])
    events = [_Running() for _ in jobs[:4]]
    for flight, event in zip(decoder._flights, events):
        flight.ready = event
    with pytest.raises(RuntimeError, match="collect first"):
        decoder.launch([jobs[-1]], [False])
    # full: the collect waits for the oldest, then takes the finished one behind it and stops at the running third
    events[1].finished = True
    assert [job for job, _ in decoder.collect()] == jobs[:2]
    assert events[0].finished and not events[2].finished
    decoder.launch([jobs[-1]], [False])
    assert decoder.holds(jobs[2]) and decoder.holds(jobs[-1]) and not decoder.holds(jobs[0])
    events[3].finished = True
    assert decoder.collect() == []  # the third still runs: the fourth waits behind it
    assert [job for job, _ in decoder.collect(wait=True)] == jobs[2:]  # the fifth ran on the CPU: done at launch
    assert not decoder.busy
    assert all(job.stream.decoded_frames == 2 for job in jobs)  # each stream's first chunk (2 of its 3 frames)


def test_one_in_flight_waits_for_each_launch(model: TalkerModel) -> None:
    """The default: a second launch is refused until a collect, and a collect waits for the running decode."""
    groups = model.cfg.code_predictor.num_code_groups
    decoder = ChunkDecoder(model.code2wav)
    jobs = [_job(i, s) for i, s in enumerate(_streams(model.code2wav, groups, [3, 3]))]
    decoder.launch([jobs[0]], [False])
    decoder._flights[0].ready = event = _Running()
    with pytest.raises(RuntimeError, match="1 launches in flight"):
        decoder.launch([jobs[1]], [False])
    assert [job for job, _ in decoder.collect()] == [jobs[0]] and event.finished

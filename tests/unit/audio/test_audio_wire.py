"""The audio stage's responses: embeddings over 1 MiB leave in chunks of at most 1 MiB and reassemble exactly."""
from __future__ import annotations

import torch

from runtime.tensor_codec import CHUNK_BYTES, TensorAssembler
from services.audio.service import ClipOut, FinishedOut
from services.audio.wire import to_pb


def test_large_embeddings_stream_in_chunks_of_at_most_one_mib() -> None:
    emb = torch.randn(5000, 64)  # 1.22 MiB, a ~6.4-minute clip at the demo width
    messages = list(to_pb(ClipOut(3, emb)))
    assert len(messages) == 2
    assert all(m.WhichOneof("msg") == "embeddings" and len(m.embeddings.data) <= CHUNK_BYTES for m in messages)
    assembler = TensorAssembler("embeddings")
    done = [assembler.add(m.embeddings) for m in messages][-1]
    assert done is not None and done[0] == "clip.3.embeddings"
    assert torch.equal(done[1], emb)


def test_finished_carries_the_timings() -> None:
    (msg,) = to_pb(FinishedOut(0.25, 1.5))
    assert msg.finished.timings.queue_seconds == 0.25 and msg.finished.timings.compute_seconds == 1.5

"""Vision wire: outputs leave as named chunks of at most 1 MiB in the tower's dtype, then `finished`."""
from __future__ import annotations

import torch

from omnimesh.v1 import common_pb2, vision_pb2
from runtime.tensor_codec import CHUNK_BYTES, TensorAssembler
from services.vision.model import VisionOutput
from services.vision.service import FinishedOut, ItemOut
from services.vision.wire import to_pb


def test_item_out_is_chunked_named_and_keeps_dtype() -> None:
    merged = torch.randn(5000, 64)  # 1.28 MB of float32: two chunks
    deepstack = [torch.randn(5000, 64).to(torch.bfloat16) for _ in range(2)]
    out = list(to_pb(ItemOut(3, VisionOutput(merged, deepstack))))
    assert all(isinstance(m, bytes) for m in out)  # serialized already: the servicer sends them as they are
    msgs = [vision_pb2.VisionResponse.FromString(m) for m in out]
    assert all(len(m.embeddings.data) <= CHUNK_BYTES for m in msgs)
    assembler, tensors = TensorAssembler("t"), {}
    for m in msgs:
        done = assembler.add(m.embeddings)
        if done is not None:
            tensors[done[0]] = done[1]
    assert list(tensors) == ["item.3.merged", "item.3.deepstack.0", "item.3.deepstack.1"]
    assert sum(m.embeddings.name == "item.3.merged" for m in msgs) == 2
    assert torch.equal(tensors["item.3.merged"], merged)
    assert tensors["item.3.deepstack.1"].dtype == torch.bfloat16 and torch.equal(tensors["item.3.deepstack.1"],
                                                                                 deepstack[1])


def test_finished_carries_timings() -> None:
    (msg,) = to_pb(FinishedOut(queue_seconds=0.25, compute_seconds=0.5))
    assert msg.finished.timings == common_pb2.Timings(queue_seconds=0.25, compute_seconds=0.5)

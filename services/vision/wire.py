"""Protobuf <-> vision domain: reads and checks an Encode request stream, writes response messages."""
from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import torch

from omnimesh.v1 import common_pb2, vision_pb2
from runtime.errors import InvalidArgument
from runtime.tensor_codec import TensorAssembler
from runtime.tensor_wire import serialized_chunks
from services.vision.model import Grid
from services.vision.preprocess import MediaFrames, MediaKind
from runtime.vision_processing import VisionProcessingConfig
from services.vision.service import EncodeInput, FinishedOut, ItemOut

_UINT8 = common_pb2.DTYPE_UINT8
_EMBEDDINGS_FIELD = vision_pb2.VisionResponse.DESCRIPTOR.fields_by_name["embeddings"].number


@dataclass(frozen=True)
class ItemSpec:
    """What `start.items[i]` promises: its kind, its grid and the frames that must follow."""

    kind: MediaKind
    grid: Grid
    min_frames: int  # a video's odd frame count repeats its last frame, so t temporal patches take T·t-T+1..T·t
    max_frames: int
    height: int
    width: int

    def accepts(self, shape: tuple[int, ...]) -> bool:
        return self.min_frames <= shape[0] <= self.max_frames and shape[1:] == (self.height, self.width, 3)

    def expected(self) -> str:
        frames = str(self.max_frames) if self.min_frames == self.max_frames else f"{self.min_frames}..{self.max_frames}"
        return f"[{frames}, {self.height}, {self.width}, 3]"

    @property
    def max_bytes(self) -> int:
        return self.max_frames * self.height * self.width * 3


@dataclass(frozen=True)
class EncodeStart:
    """What an Encode call's `start` message promises, checked before any frame is read."""

    request_id: str
    specs: list[ItemSpec]

    @property
    def num_patches(self) -> int:
        return sum(s.grid.num_patches for s in self.specs)


async def read_start(requests: AsyncIterator[vision_pb2.VisionRequest], cfg: VisionProcessingConfig,
                     max_request_patches: int) -> EncodeStart:
    """The `start` message, checked: every item's grid, and the request's patches against the replica's limit."""
    first = await anext(requests, None)
    if first is None or first.WhichOneof("msg") != "start":
        raise InvalidArgument("start", "the first message of Encode must be `start`")
    start = first.start
    if not start.items:
        raise InvalidArgument("start.items", "is empty; send at least one image or video")
    head = EncodeStart(start.request_id, [_item_spec(i, item, cfg) for i, item in enumerate(start.items)])
    if head.num_patches > max_request_patches:
        raise InvalidArgument("start.items", f"hold {head.num_patches} patches, over this replica's limit "
                              f"max_request_patches={max_request_patches}; send fewer or smaller items, or split the "
                              "request")
    return head


async def read_items(requests: AsyncIterator[vision_pb2.VisionRequest], head: EncodeStart) -> EncodeInput:
    """The rest of the stream: every item's frame chunks, until the client half-closes."""
    frames = await _read_frames(requests, head.specs)
    return EncodeInput(head.request_id, [MediaFrames(s.kind, frames[f"item.{i}"]) for i, s in enumerate(head.specs)])


def _item_spec(i: int, item: vision_pb2.VisionItem, cfg: VisionProcessingConfig) -> ItemSpec:
    field = f"start.items[{i}].grid_thw"
    grid = tuple(item.grid_thw)
    if len(grid) != 3:
        raise InvalidArgument(field, f"has {len(grid)} entries; send (t, h, w) in patches")
    t, h, w = grid
    if min(grid) < 1:
        raise InvalidArgument(field, f"is {list(grid)}; every entry must be >= 1")
    merge = cfg.merge_size
    if h % merge or w % merge:
        raise InvalidArgument(field, f"is {list(grid)}; h and w must be multiples of merge_size={merge} "
                              f"(frame sides multiples of {cfg.factor} pixels)")
    kind = MediaKind.VIDEO if item.is_video else MediaKind.IMAGE
    if kind is MediaKind.IMAGE and t != 1:
        raise InvalidArgument(field, f"is {list(grid)}; an image has t == 1 (send several frames as a video)")
    temporal = cfg.temporal_patch_size
    lo, hi = (1, 1) if kind is MediaKind.IMAGE else (temporal * (t - 1) + 1, temporal * t)
    return ItemSpec(kind, Grid(t, h, w), lo, hi, h * cfg.patch_size, w * cfg.patch_size)


async def _read_frames(requests: AsyncIterator[vision_pb2.VisionRequest], specs: list[ItemSpec]
                       ) -> dict[str, torch.Tensor]:
    assembler = TensorAssembler("frames", max_bytes=max(s.max_bytes for s in specs))
    frames: dict[str, torch.Tensor] = {}
    received: dict[str, int] = {}
    async for msg in requests:
        if msg.WhichOneof("msg") != "frames":
            raise InvalidArgument("start", "only one `start` message is allowed per Encode call")
        chunk = msg.frames
        _check_chunk(chunk, specs, frames)
        # Count bytes as they come, so a peer cannot make us buffer more than the shape it declared.
        received[chunk.name] = received.get(chunk.name, 0) + len(chunk.data)
        if received[chunk.name] > math.prod(chunk.shape):
            raise InvalidArgument(f"frames[{chunk.name}]", f"sent more than the {math.prod(chunk.shape)} bytes of "
                                  f"shape {list(chunk.shape)}")
        done = assembler.add(chunk)
        if done is not None:
            frames[done[0]] = done[1]
    if assembler.pending:
        raise InvalidArgument("frames", f"the stream ended with tensors incomplete: {assembler.pending}")
    missing = [f"item.{i}" for i in range(len(specs)) if f"item.{i}" not in frames]
    if missing:
        raise InvalidArgument(f"frames[{missing[0]}]", f"is missing; every item in start.items needs its frames "
                              f"(missing: {missing})")
    return frames


def _check_chunk(chunk: common_pb2.Tensor, specs: list[ItemSpec], done: dict[str, torch.Tensor]) -> None:
    """Checks a frames chunk's name, dtype and shape against its item's grid, before any of its bytes are kept."""
    field = f"frames[{chunk.name}]"
    index = _item_index(chunk.name)
    if not 0 <= index < len(specs):
        raise InvalidArgument(field, f"is not a tensor of this request; send item.0 .. item.{len(specs) - 1}")
    if chunk.name in done:
        raise InvalidArgument(field, "was sent twice; send each item's frames once")
    spec = specs[index]
    if chunk.dtype != _UINT8:
        raise InvalidArgument(field, f"has dtype {_dtype_name(chunk.dtype)}; frames are uint8 RGB")
    shape = tuple(int(s) for s in chunk.shape)
    if len(shape) != 4 or shape[-1] != 3:
        raise InvalidArgument(field, f"has shape {list(shape)}; frames are 4-D [frames, height, width, 3]")
    if not spec.accepts(shape):
        raise InvalidArgument(field, f"has shape {list(shape)}, which does not match start.items[{index}].grid_thw "
                              f"{list(spec.grid)}: expected {spec.expected()}")


def _item_index(name: str) -> int:
    """i for a name spelled exactly `item.<i>` (no sign, no leading zeros), else -1."""
    prefix, _, digits = name.partition(".")
    if prefix != "item" or not (digits.isascii() and digits.isdigit()) or name != f"item.{int(digits)}":
        return -1
    return int(digits)


def _dtype_name(dtype: int) -> str:
    return common_pb2.DType.Name(dtype) if dtype in common_pb2.DType.values() else str(dtype)


def to_pb(out: ItemOut | FinishedOut) -> Iterator[vision_pb2.VisionResponse | bytes]:
    """One item's merged and deepstack tensors as chunks of at most 1 MiB, already serialized (one copy of a video's
    ~96 MB on this loop, where a message per chunk took four; services/vision/servicer.py sends them as they are), or
    the closing `finished`."""
    if isinstance(out, ItemOut):
        named = [(f"item.{out.index}.merged", out.output.merged)]
        named += [(f"item.{out.index}.deepstack.{k}", d) for k, d in enumerate(out.output.deepstack)]
        for name, tensor in named:
            yield from serialized_chunks(_EMBEDDINGS_FIELD, name, tensor)
    else:
        yield vision_pb2.VisionResponse(finished=vision_pb2.VisionFinished(
            timings=common_pb2.Timings(queue_seconds=out.queue_seconds, compute_seconds=out.compute_seconds)))

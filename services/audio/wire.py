"""Protobuf <-> audio domain: reads and checks an Encode request stream, writes response messages."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import torch

from omnimesh.v1 import audio_pb2, common_pb2
from runtime.errors import InvalidArgument
from runtime.tensor_codec import TensorAssembler, encode_tensor
from services.audio.service import AudioLimits, ClipOut, EncodeInput, FinishedOut

_FLOAT32 = common_pb2.DTYPE_FLOAT32
_BYTES_PER_SAMPLE = 4


@dataclass(frozen=True)
class EncodeStart:
    """What an Encode call's `start` message promises, checked before any sample is read."""

    request_id: str
    counts: list[int]  # samples of each clip
    frames: int  # their log-mel frames: the stage's unit of work


async def read_start(requests: AsyncIterator[audio_pb2.AudioRequest], limits: AudioLimits) -> EncodeStart:
    """The `start` message, checked against the replica's limits."""
    first = await anext(requests, None)
    if first is None or first.WhichOneof("msg") != "start":
        raise InvalidArgument("start", "the first message of Encode must be `start`")
    counts = [int(n) for n in first.start.num_samples]
    return EncodeStart(first.start.request_id, counts, _check_num_samples(counts, limits))


async def read_clips(requests: AsyncIterator[audio_pb2.AudioRequest], head: EncodeStart) -> EncodeInput:
    """The rest of the stream: every clip's sample chunks, until the client half-closes."""
    clips = await _read_clips(requests, head.counts)
    return EncodeInput(head.request_id, [clips[f"clip.{i}"] for i in range(len(head.counts))])


def _check_num_samples(counts: list[int], limits: AudioLimits) -> int:
    """Rejects what `start.num_samples` promises before any sample is read: no clips, a too short clip, too much;
    returns the clips' log-mel frames."""
    if not counts:
        raise InvalidArgument("start.num_samples", "is empty; send at least one clip")
    for i, n in enumerate(counts):
        if n < limits.min_samples:
            ms = limits.min_samples * 1000 / limits.sampling_rate
            raise InvalidArgument(f"start.num_samples[{i}]", f"is {n}; the encoder needs at least "
                                  f"{limits.min_samples} samples ({ms:.1f} ms at {limits.sampling_rate} Hz) per clip")
    frames = sum(n // limits.hop_length for n in counts)
    if frames > limits.max_request_frames:
        seconds = sum(counts) / limits.sampling_rate
        raise InvalidArgument("start.num_samples", f"clips total {seconds:.2f} s of audio, over this replica's limit "
                              f"max_request_seconds={limits.max_request_seconds:g} (mesh.audio.encoder."
                              f"max_request_size={limits.max_request_frames} mel frames, 100 per second); "
                              f"send less audio or split it over several requests")
    return frames


async def _read_clips(requests: AsyncIterator[audio_pb2.AudioRequest], counts: list[int]) -> dict[str, torch.Tensor]:
    assembler = TensorAssembler("samples", max_bytes=max(counts) * _BYTES_PER_SAMPLE)
    clips: dict[str, torch.Tensor] = {}
    received: dict[str, int] = {}
    async for msg in requests:
        if msg.WhichOneof("msg") != "samples":
            raise InvalidArgument("start", "only one `start` message is allowed per Encode call")
        chunk = msg.samples
        expected = _check_chunk(chunk, counts, clips)
        # Count bytes as they come, so a peer cannot make us buffer more than the clip it declared.
        received[chunk.name] = received.get(chunk.name, 0) + len(chunk.data)
        if received[chunk.name] > expected * _BYTES_PER_SAMPLE:
            raise InvalidArgument(f"samples[{chunk.name}]", f"sent more than the {expected * _BYTES_PER_SAMPLE} "
                                  f"bytes of {expected} float32 samples")
        done = assembler.add(chunk)
        if done is not None:
            clips[done[0]] = _check_finite(*done)
    if assembler.pending:
        raise InvalidArgument("samples", f"the stream ended with clips incomplete: {assembler.pending}")
    missing = [f"clip.{i}" for i in range(len(counts)) if f"clip.{i}" not in clips]
    if missing:
        raise InvalidArgument(f"samples[{missing[0]}]", f"is missing; every clip in start.num_samples needs its "
                              f"samples (missing: {missing})")
    return clips


def _check_chunk(chunk: common_pb2.Tensor, counts: list[int], done: dict[str, torch.Tensor]) -> int:
    """Checks a samples chunk's name, dtype and shape against start, before any of its bytes are kept; returns the
    clip's declared sample count."""
    field = f"samples[{chunk.name}]"
    index = _clip_index(chunk.name, len(counts))
    if index is None:
        raise InvalidArgument(field, f"is not a tensor of this request; send clip.0 .. clip.{len(counts) - 1}")
    if chunk.name in done:
        raise InvalidArgument(field, "was sent twice; send each clip's samples once")
    if chunk.dtype != _FLOAT32:
        name = common_pb2.DType.Name(chunk.dtype) if chunk.dtype in common_pb2.DType.values() else chunk.dtype
        raise InvalidArgument(field, f"has dtype {name}; samples are float32 (DTYPE_FLOAT32) in [-1, 1]")
    shape = [int(s) for s in chunk.shape]
    if len(shape) != 1:
        raise InvalidArgument(field, f"has shape {shape}; a clip is 1-D [samples], 16 kHz mono")
    expected = counts[index]
    if shape[0] != expected:
        raise InvalidArgument(field, f"has {shape[0]} samples, but start.num_samples[{index}] is {expected}")
    return expected


def _clip_index(name: str, num_clips: int) -> int | None:
    """i for a name "clip.<i>" with i a clip of this request, written without leading zeros; else None."""
    prefix, _, digits = name.partition(".")
    if prefix != "clip" or not (digits.isascii() and digits.isdigit()) or str(int(digits)) != digits:
        return None
    index = int(digits)
    return index if index < num_clips else None


def _check_finite(name: str, samples: torch.Tensor) -> torch.Tensor:
    bad = int((~torch.isfinite(samples)).sum())
    if bad:
        raise InvalidArgument(f"samples[{name}]", f"holds {bad} non-finite values (NaN or infinity); samples must be "
                              f"finite, normally in [-1, 1]")
    return samples


def to_pb(out: ClipOut | FinishedOut) -> Iterator[audio_pb2.AudioResponse]:
    """One clip's embeddings as chunks of at most 1 MiB, or the closing `finished`."""
    if isinstance(out, ClipOut):
        for chunk in encode_tensor(f"clip.{out.index}.embeddings", out.embeddings):
            yield audio_pb2.AudioResponse(embeddings=chunk)
    else:
        yield audio_pb2.AudioResponse(finished=audio_pb2.AudioFinished(
            timings=common_pb2.Timings(queue_seconds=out.queue_seconds, compute_seconds=out.compute_seconds)))

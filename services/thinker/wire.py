"""Protobuf <-> thinker domain: reads a Generate request stream, writes response messages."""
from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace

import torch

from omnimesh.v1 import common_pb2, thinker_pb2
from runtime.config import SamplingDefaults
from runtime.errors import InvalidArgument
from runtime.sampling import resolve_sampling
from runtime.tensor_codec import TensorAssembler, encode_tensor
from services.thinker.cache_report import CacheReport
from services.thinker.model import MediaKind, MediaSpanGrid, ThinkerConfig, prompt_positions
from services.thinker.request import MediaInput, ThinkerRequest
from services.thinker.service import ConditioningOut, FinishedOut, GenerateInput, TokensOut

_KINDS = {thinker_pb2.MEDIA_KIND_IMAGE: "image", thinker_pb2.MEDIA_KIND_VIDEO: "video",
          thinker_pb2.MEDIA_KIND_AUDIO: "audio", thinker_pb2.MEDIA_KIND_AUDIO_IN_VIDEO: "audio_in_video"}
FINISH_TO_PB = {"stop": common_pb2.FINISH_REASON_STOP, "length": common_pb2.FINISH_REASON_LENGTH,
                "cancelled": common_pb2.FINISH_REASON_CANCELLED}


async def read_generate_input(requests: AsyncIterator[thinker_pb2.GenerateRequest], cfg: ThinkerConfig,
                              defaults: SamplingDefaults, max_model_len: int) -> GenerateInput:
    """Consumes the whole request stream: start, then every media tensor chunk, until the client half-closes."""
    first = await anext(requests, None)
    if first is None or first.WhichOneof("msg") != "start":
        raise InvalidArgument("start", "the first message of Generate must be `start`")
    start = first.start
    ids = list(start.token_ids)
    if not ids:
        raise InvalidArgument("start.token_ids", "is empty; a prompt needs at least one token")
    bad = next((t for t in ids if not 0 <= t < cfg.vocab_size), None)
    if bad is not None:
        raise InvalidArgument("start.token_ids", f"holds {bad}, outside the vocabulary [0, {cfg.vocab_size})")
    spans = [_check_span(i, s, ids, cfg) for i, s in enumerate(start.media)]
    tensors = await _read_media(requests, _announced(spans, ids, cfg))
    media = [_media_input(i, s, ids, tensors, cfg) for i, s in enumerate(spans)]
    positions = prompt_positions(ids, _position_grids(media), cfg)
    sampling = resolve_sampling(start.sampling, defaults, "start.sampling", max_tokens_cap=max_model_len - len(ids))
    request = ThinkerRequest(positions.positions, positions.rope_delta, media,
                             capture_talker_states=(start.return_talker_conditioning
                                                    and cfg.accept_hidden_layer is not None))
    return GenerateInput(start.request_id, ids, sampling, request)


def _position_grids(media: list[MediaInput]) -> list[MediaSpanGrid]:
    """One grid per media item for M-RoPE. An audio item may come as several back-to-back spans (each with its own
    content hash, so the prefix cache keys its rows apart: a streamed clip's finished encoder windows); they sit
    between one `<|audio_start|>` and `<|audio_end|>`, so they are placed as the one item they form."""
    grids: list[MediaSpanGrid] = []
    for k, m in enumerate(media):
        joins = k > 0 and m.kind == "audio" and media[k - 1].kind == "audio" and media[k - 1].end == m.offset
        if joins:
            grids[-1] = replace(grids[-1], num_audio_tokens=grids[-1].num_audio_tokens + m.length)
        else:
            grids.append(MediaSpanGrid(MediaKind(m.kind), tuple(m.grid_thw) or None, m.second_per_grid,
                                       m.num_audio_rows))
    return grids


def _check_span(i: int, span: thinker_pb2.MediaSpan, ids: list[int], cfg: ThinkerConfig) -> thinker_pb2.MediaSpan:
    field = f"start.media[{i}]"
    kind = _KINDS.get(span.kind)
    if kind is None:
        raise InvalidArgument(f"{field}.kind", "must be IMAGE, VIDEO, AUDIO or AUDIO_IN_VIDEO")
    if span.length == 0 or span.offset + span.length > len(ids):
        raise InvalidArgument(field, f"span [{span.offset}, {span.offset + span.length}) is empty or past the "
                              f"prompt's {len(ids)} tokens")
    body = ids[span.offset:span.offset + span.length]
    if kind == "audio_in_video":
        if set(body) - {cfg.video_token_id, cfg.audio_token_id}:
            raise InvalidArgument(field, f"an audio-in-video span covers only video ({cfg.video_token_id}) and "
                                  f"audio ({cfg.audio_token_id}) placeholders")
        if body.count(cfg.audio_token_id) != span.audio_length or span.audio_length == 0:
            raise InvalidArgument(f"{field}.audio_length", f"is {span.audio_length}; the span holds "
                                  f"{body.count(cfg.audio_token_id)} audio placeholders (at least one)")
    else:
        pad = {"image": cfg.image_token_id, "video": cfg.video_token_id, "audio": cfg.audio_token_id}[kind]
        if any(t != pad for t in body):
            raise InvalidArgument(field, f"span must cover only {kind} placeholder tokens (id {pad})")
    if kind != "audio" and len(span.grid_thw) != 3:
        raise InvalidArgument(f"{field}.grid_thw", f"must hold (t, h, w) for {kind} spans")
    return span


def _announced(spans: list[thinker_pb2.MediaSpan], ids: list[int], cfg: ThinkerConfig) -> dict[str, tuple[int, int]]:
    """Every tensor the spans call for, by name, with its shape: all the media a stream may bring."""
    shapes: dict[str, tuple[int, int]] = {}
    for i, span in enumerate(spans):
        kind = _KINDS[span.kind]
        rows = span.length
        if kind == "audio_in_video":
            rows = ids[span.offset:span.offset + span.length].count(cfg.video_token_id)
            shapes[f"media.{i}.audio_embeddings"] = (span.audio_length, cfg.hidden_size)
        shapes[f"media.{i}.embeddings"] = (rows, cfg.hidden_size)
        for k in range(0 if kind == "audio" else cfg.num_deepstack):
            shapes[f"media.{i}.deepstack.{k}"] = (rows, cfg.hidden_size)
    return shapes


async def _read_media(requests: AsyncIterator[thinker_pb2.GenerateRequest],
                      announced: dict[str, tuple[int, int]]) -> dict[str, torch.Tensor]:
    """Only what `start` announced, each once and of its shape, refused at its first chunk otherwise: a stream
    buffers no more than its prompt's media."""
    assembler = TensorAssembler("media")
    tensors: dict[str, torch.Tensor] = {}
    async for msg in requests:
        if msg.WhichOneof("msg") != "media":
            raise InvalidArgument("start", "only one `start` message is allowed per Generate call")
        name, shape = msg.media.name, tuple(msg.media.shape)
        if msg.media.chunk_index == 0 and (name not in announced or name in tensors):
            raise InvalidArgument(f"media[{name[:64]}]", "was not announced by start.media, or came twice")
        if msg.media.chunk_index == 0 and len(shape) == 2 and shape[0] != announced[name][0]:
            raise InvalidArgument(f"media[{name}]", f"has {shape[0]} rows; start.media announced {announced[name][0]}")
        done = assembler.add(msg.media)
        if done is not None:
            tensors[done[0]] = done[1]
    if assembler.pending:
        raise InvalidArgument("media", f"the stream ended with tensors incomplete: {assembler.pending}")
    return tensors


def _media_input(i: int, span: thinker_pb2.MediaSpan, ids: list[int], tensors: dict[str, torch.Tensor],
                 cfg: ThinkerConfig) -> MediaInput:
    kind = _KINDS[span.kind]
    hidden = cfg.hidden_size
    if kind != "audio_in_video":
        emb = _expect(tensors, f"media.{i}.embeddings", (span.length, hidden))
        deepstack = [] if kind == "audio" else [
            _expect(tensors, f"media.{i}.deepstack.{k}", (span.length, hidden))
            for k in range(cfg.num_deepstack)]
        return MediaInput(kind, span.offset, span.length, tuple(span.grid_thw), span.second_per_grid,
                          span.content_hash, emb, deepstack)
    # Interleaved: video rows take the vision embeddings (and deepstack) in order, audio rows the sound track's.
    body = ids[span.offset:span.offset + span.length]
    is_video = torch.tensor([t == cfg.video_token_id for t in body])
    num_video = int(is_video.sum())
    video = _expect(tensors, f"media.{i}.embeddings", (num_video, hidden))
    audio = _expect(tensors, f"media.{i}.audio_embeddings", (span.audio_length, hidden))
    emb = torch.empty(span.length, hidden, dtype=video.dtype)
    emb[is_video], emb[~is_video] = video, audio.to(video.dtype)
    deepstack = []
    for k in range(cfg.num_deepstack):
        level = torch.zeros(span.length, hidden, dtype=video.dtype)
        level[is_video] = _expect(tensors, f"media.{i}.deepstack.{k}", (num_video, hidden))
        deepstack.append(level)
    return MediaInput(kind, span.offset, span.length, tuple(span.grid_thw), span.second_per_grid, span.content_hash,
                      emb, deepstack, visual_mask=tuple(bool(v) for v in is_video.tolist()))


def _expect(tensors: dict[str, torch.Tensor], name: str, shape: tuple[int, int]) -> torch.Tensor:
    t = tensors.get(name)
    if t is None:
        raise InvalidArgument(f"media[{name}]", "is missing")
    if tuple(t.shape) != shape:
        raise InvalidArgument(f"media[{name}]", f"has shape {list(t.shape)}, expected {list(shape)}")
    if not t.is_floating_point():  # kept in the sender's float dtype; the step casts to the model's on the device
        raise InvalidArgument(f"media[{name}]", f"has dtype {t.dtype}; allowed: float32, float16, bfloat16")
    return t


def to_pb(out: TokensOut | ConditioningOut | FinishedOut, token_bytes: Callable[[int], bytes]
          ) -> Iterator[thinker_pb2.GenerateResponse]:  # fmt: skip
    """`token_bytes`: the tokenizer's id-to-bytes table, so logprobs carry each token's text to the caller."""
    if isinstance(out, TokensOut):
        yield thinker_pb2.GenerateResponse(tokens=thinker_pb2.TokenBatch(
            token_ids=out.token_ids, text=out.text,
            logprobs=[common_pb2.TokenLogprob(token_id=t, logprob=lp, token=token_bytes(t), top=[
                common_pb2.TopLogprob(token_id=a, logprob=b, token=token_bytes(a)) for a, b in top])
                for t, lp, top in out.logprobs]))
    elif isinstance(out, ConditioningOut):
        for chunk in encode_tensor("talker.media_hidden", out.media_hidden):
            yield thinker_pb2.GenerateResponse(talker_conditioning=chunk)
    else:
        yield thinker_pb2.GenerateResponse(finished=thinker_pb2.GenerateFinished(
            finish_reason=FINISH_TO_PB[out.reason.value],
            usage=common_pb2.Usage(prompt_tokens=out.prompt_tokens, completion_tokens=out.completion_tokens,
                                   cached_prompt_tokens=out.cached_prompt_tokens),
            timings=common_pb2.Timings(queue_seconds=out.queue_seconds, compute_seconds=out.compute_seconds)))


def cache_event_to_pb(report: CacheReport) -> thinker_pb2.CacheEvent:
    load = report.load
    return thinker_pb2.CacheEvent(
        snapshot=report.delta.snapshot, stored=report.delta.stored, evicted=report.delta.evicted,
        load=thinker_pb2.ReplicaLoad(running=load.running, waiting=load.waiting, kv_usage=load.kv_usage),
        block_size=report.block_size, prefix_cache=report.prefix_cache, needs_state=report.states is not None,
        states_stored=report.states.stored if report.states else [],
        states_evicted=report.states.evicted if report.states else [])

"""Media of a chat request: decoded in worker threads, encoded by the vision and audio stages concurrently."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import torch

from omnimesh.v1 import thinker_pb2
from runtime.chat_template import MediaSpan
from runtime.errors import Unimplemented
from gateway.chat_input import MediaBytes
from gateway.clients.encoders import AudioClient, VisionClient, VisionItemInput
from gateway.media.audio import decode_audio
from gateway.media.vision import VisionMediaConfig, decode_image, decode_video

_PB_KIND = {"image": thinker_pb2.MEDIA_KIND_IMAGE, "video": thinker_pb2.MEDIA_KIND_VIDEO,
            "audio": thinker_pb2.MEDIA_KIND_AUDIO}


@dataclass(frozen=True)
class DecodedMedia:
    kind: str
    field: str
    num_tokens: int
    content_hash: str
    vision: VisionItemInput | None = None
    second_per_grid: float = 0.0
    samples: torch.Tensor | None = None  # audio: float32 16 kHz mono


@dataclass(frozen=True)
class EncodedMedia:
    embeddings: torch.Tensor  # [tokens, hidden]
    deepstack: list[torch.Tensor]


class MediaPipeline:
    """Decodes and encodes one request's media. A stage that is not deployed makes its media UNIMPLEMENTED."""

    def __init__(self, vision_cfg: VisionMediaConfig | None, vision: VisionClient | None, num_deepstack: int,
                 audio: AudioClient | None, max_audio_seconds: float) -> None:
        self._vision_cfg = vision_cfg
        self._vision = vision
        self._num_deepstack = num_deepstack
        self._audio = audio
        self._max_audio_seconds = max_audio_seconds

    @property
    def served_inputs(self) -> frozenset[str]:
        served = {"image", "video"} if self._vision is not None else set()
        return frozenset(served | ({"audio"} if self._audio is not None else set()))

    async def decode(self, media: list[MediaBytes]) -> list[DecodedMedia]:
        for m in media:
            if m.kind not in self.served_inputs:
                raise Unimplemented(f"{m.field}: {m.kind} input is not served by this deployment (it serves "
                                    f"{', '.join(sorted(self.served_inputs)) or 'text only'})")
        return list(await asyncio.gather(*(asyncio.to_thread(self._decode_one, m) for m in media)))

    def _decode_one(self, m: MediaBytes) -> DecodedMedia:
        if m.kind == "audio":
            a = decode_audio(m.data, m.field, self._max_audio_seconds)
            return DecodedMedia("audio", m.field, a.token_count, a.content_hash,
                                samples=torch.from_numpy(a.samples))
        assert self._vision_cfg is not None
        d = decode_image(m.data, m.field, self._vision_cfg) if m.kind == "image" else \
            decode_video(m.data, m.field, self._vision_cfg)
        item = VisionItemInput(torch.from_numpy(d.frames), (d.grid.t, d.grid.h, d.grid.w), m.kind == "video")
        return DecodedMedia(m.kind, m.field, d.num_tokens, d.content_hash, item,
                            getattr(d, "second_per_grid", 0.0))

    async def encode(self, request_id: str, decoded: list[DecodedMedia], timeout: float | None) -> list[EncodedMedia]:
        """Every item's embeddings, in request order; vision and audio stages run at once."""
        visual = [i for i, d in enumerate(decoded) if d.vision is not None]
        sounds = [i for i, d in enumerate(decoded) if d.samples is not None]
        out: list[EncodedMedia | None] = [None] * len(decoded)
        try:
            async with asyncio.TaskGroup() as group:  # one failure cancels the other stage's call
                v = group.create_task(self._vision.encode(request_id, [decoded[i].vision for i in visual],
                                                          self._num_deepstack, timeout)) if visual else None
                a = group.create_task(self._audio.encode(request_id, [decoded[i].samples for i in sounds],
                                                         timeout)) if sounds else None
        except BaseExceptionGroup as group_error:  # the client sees the stage's own error, not a group of them
            raise group_error.exceptions[0] from None
        for i, item in zip(visual, v.result() if v else []):
            out[i] = EncodedMedia(item.merged, item.deepstack)
        for i, emb in zip(sounds, a.result() if a else []):
            out[i] = EncodedMedia(emb, [])
        return [o for o in out if o is not None]


def thinker_media(spans: list[MediaSpan], decoded: list[DecodedMedia], encoded: list[EncodedMedia]
                  ) -> tuple[list[thinker_pb2.MediaSpan], dict[str, torch.Tensor]]:
    """The thinker's media spans and the tensors named as its contract says ("media.<i>.embeddings", ...)."""
    pbs, tensors = [], {}
    for span in spans:
        d, e = decoded[span.index], encoded[span.index]
        pbs.append(thinker_pb2.MediaSpan(kind=_PB_KIND[d.kind], offset=span.start, length=span.length,
                                         grid_thw=list(d.vision.grid_thw) if d.vision else [],
                                         second_per_grid=d.second_per_grid, content_hash=d.content_hash))
        tensors[f"media.{span.index}.embeddings"] = e.embeddings
        for k, level in enumerate(e.deepstack):
            tensors[f"media.{span.index}.deepstack.{k}"] = level
    return pbs, tensors

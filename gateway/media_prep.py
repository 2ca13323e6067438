"""Media of a chat request: decoded in worker threads, encoded by the vision and audio stages concurrently."""
from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from omnimesh.v1 import thinker_pb2
from runtime.chat_template import MediaSpan
from runtime.errors import Unimplemented
from runtime.work_budget import WorkBudget
from gateway.chat_input import MediaBytes
from gateway.clients.encoders import AudioClient, VisionClient, VisionItemInput
from gateway.media.audio import DecodedAudio, decode_audio, extract_video_audio, header_token_count
from gateway.media.footprint import audio_bytes, image_bytes, video_bytes
from gateway.media.heap import map_large_blocks, return_freed_heap
from gateway.media.vision import VisionMediaConfig, decode_image, decode_video, image_tokens, video_tokens
from gateway.media.wav import parse_wav

T = TypeVar("T")

_PB_KIND = {"image": thinker_pb2.MEDIA_KIND_IMAGE, "video": thinker_pb2.MEDIA_KIND_VIDEO,
            "audio": thinker_pb2.MEDIA_KIND_AUDIO, "audio_in_video": thinker_pb2.MEDIA_KIND_AUDIO_IN_VIDEO}


@dataclass(frozen=True)
class DecodedMedia:
    kind: str  # image | video | audio
    field: str
    num_tokens: int  # placeholders of the item itself (video tokens only, for a video with a sound track)
    content_hash: str
    vision: VisionItemInput | None = None
    second_per_grid: float = 0.0
    samples: torch.Tensor | None = None  # audio, or the sound track of a video heard too: float32 16 kHz mono
    track_tokens: int = 0  # audio placeholders of a video's sound track (use_audio_in_video)
    timestamps: tuple[float, ...] = ()  # Qwen3.5 video: each temporal patch's time; laid out one block per frame

    @property
    def with_track(self) -> bool:
        return self.kind == "video" and self.samples is not None


@dataclass(frozen=True)
class EncodedMedia:
    embeddings: torch.Tensor  # [tokens, hidden]: vision or audio rows
    deepstack: list[torch.Tensor] = field(default_factory=list)
    track: torch.Tensor | None = None  # a video's sound track: [track tokens, hidden]


async def by_headers(media: list[MediaBytes], check: Callable[..., T], *args: object) -> T:
    """`check(*args)`, which reads only `media`'s headers: on the event loop when every item is a WAV clip (its header
    parses in ~3 us, a twentieth of the ~60 us of loop time a worker-thread hop costs; a Transcribe request made
    three), else on a worker thread (libsndfile and FFmpeg read other containers', images' and videos' headers)."""
    if all(m.kind == "audio" and parse_wav(m.data) is not None for m in media):
        return check(*args)
    return await asyncio.to_thread(check, *args)


class MediaPipeline:
    """Decodes and encodes one request's media. A stage that is not deployed makes its media UNIMPLEMENTED."""

    def __init__(self, vision_cfg: VisionMediaConfig | None, vision: VisionClient | None, num_deepstack: int,
                 audio: AudioClient | None, max_audio_seconds: float, max_media_bytes: int = 2 << 30,
                 audio_min_samples: int = 0) -> None:
        self._vision_cfg = vision_cfg
        self._vision = vision
        self._num_deepstack = num_deepstack
        self._audio = audio
        self._max_audio_seconds = max_audio_seconds
        self._audio_min_samples = audio_min_samples  # Qwen3-ASR zero-pads shorter clips (to 0.5 s)
        # decoded media held by this replica's requests, from admission until the encoders took it
        self.budget = WorkBudget("gateway", "bytes of media", max_media_bytes, "gateway.max_media_bytes")
        self._trim_pending = False
        map_large_blocks()

    @property
    def served_inputs(self) -> frozenset[str]:
        served = {"image", "video"} if self._vision is not None else set()
        return frozenset(served | ({"audio"} if self._audio is not None else set()))

    @property
    def encoders(self) -> list[VisionClient | AudioClient]:
        """The encoder stages this gateway routes to."""
        return [c for c in (self._vision, self._audio) if c is not None]

    async def decode(self, media: list[MediaBytes], use_audio_in_video: bool = False) -> list[DecodedMedia]:
        self.check_served(media, use_audio_in_video)
        return list(await asyncio.gather(*(asyncio.to_thread(self._decode_one, m, use_audio_in_video)
                                           for m in media)))

    def check_served(self, media: list[MediaBytes], use_audio_in_video: bool) -> None:
        for m in media:
            if m.kind not in self.served_inputs:
                raise Unimplemented(f"{m.field}: {m.kind} input is not served by this deployment (it serves "
                                    f"{', '.join(sorted(self.served_inputs)) or 'text only'})")
        if use_audio_in_video and any(m.kind == "video" for m in media) and self._audio is None:
            raise Unimplemented("use_audio_in_video: hearing a video's sound track needs the audio stage, which this "
                                "deployment does not serve")

    def return_memory_when_idle(self, after_s: float = 2.0) -> None:
        """Soon (once the ending request's frames and traceback are gone), if no request holds decoded media then,
        gives the freed heap back on a worker thread (tens of ms). One trim at a time: a burst of ending requests
        schedules one, not a full `gc.collect` on the event loop each."""
        if self._trim_pending:
            return
        loop = asyncio.get_running_loop()

        def trim_if_idle() -> None:
            self._trim_pending = False
            if self.budget.held == 0:
                gc.collect()  # a refused request's traceback and frames form cycles that still hold its frames
                try:
                    loop.run_in_executor(None, return_freed_heap)
                except RuntimeError:  # the default executor is shut down: the process is stopping
                    pass

        self._trim_pending = True
        loop.call_later(after_s, trim_if_idle)

    def footprint(self, media: list[MediaBytes], use_audio_in_video: bool) -> int:
        """Bytes the served media will hold decoded, from their headers. May block: run it through `by_headers`."""
        total = 0
        for m in media:
            if m.kind == "audio" and self._audio is not None:
                total += audio_bytes(m.data, self._max_audio_seconds)
            elif m.kind in ("image", "video") and self._vision_cfg is not None:
                kind_bytes = image_bytes if m.kind == "image" else video_bytes
                total += kind_bytes(m.data, m.field, self._vision_cfg)
                if m.kind == "video" and use_audio_in_video and self._audio is not None:
                    total += audio_bytes(m.data, self._max_audio_seconds)
        return total

    def header_tokens(self, media: list[MediaBytes]) -> int:
        """Thinker tokens the request's media take at least by their headers alone (a video's sound track counts 0),
        so a prompt that cannot fit is refused before any pixel or sample is decoded. May block: run it through
        `by_headers`, after check_served."""
        total = sum(header_token_count(m.data, self._max_audio_seconds) for m in media if m.kind == "audio")
        if self._vision_cfg is None:
            return total
        count = {"image": image_tokens, "video": video_tokens}
        return total + sum(count[m.kind](m.data, m.field, self._vision_cfg) for m in media if m.kind in count)

    def _decode_one(self, m: MediaBytes, use_audio_in_video: bool) -> DecodedMedia:
        if m.kind == "audio":
            a = decode_audio(m.data, m.field, self._max_audio_seconds, self._audio_min_samples)
            return DecodedMedia("audio", m.field, a.token_count, a.content_hash, samples=torch.from_numpy(a.samples))
        assert self._vision_cfg is not None
        timestamps: tuple[float, ...] = ()
        if m.kind == "image":
            d = decode_image(m.data, m.field, self._vision_cfg)
            second_per_grid = 0.0
        else:
            d = decode_video(m.data, m.field, self._vision_cfg)
            second_per_grid, timestamps = d.second_per_grid, d.timestamps
        item = VisionItemInput(torch.from_numpy(d.frames), (d.grid.t, d.grid.h, d.grid.w), m.kind == "video")
        track: DecodedAudio | None = None
        if m.kind == "video" and use_audio_in_video:
            track = extract_video_audio(m.data, m.field, self._max_audio_seconds)  # None: a silent video
        if track is None:
            return DecodedMedia(m.kind, m.field, d.num_tokens, d.content_hash, item, second_per_grid,
                                timestamps=timestamps)
        return DecodedMedia(m.kind, m.field, d.num_tokens, f"{d.content_hash}+{track.content_hash}", item,
                            second_per_grid, torch.from_numpy(track.samples), track.token_count)

    async def encode(self, request_id: str, decoded: list[DecodedMedia], timeout: float | None) -> list[EncodedMedia]:
        """Every item's embeddings, in request order; vision and audio stages run at once."""
        visual = [i for i, d in enumerate(decoded) if d.vision is not None]
        sounds = [i for i, d in enumerate(decoded) if d.samples is not None]
        try:
            async with asyncio.TaskGroup() as group:  # one failure cancels the other stage's call
                v = group.create_task(self._vision.encode(request_id, [decoded[i].vision for i in visual],
                                                          self._num_deepstack, timeout)) if visual else None
                a = group.create_task(self._audio.encode(request_id, [decoded[i].samples for i in sounds],
                                                         timeout)) if sounds else None
        except BaseExceptionGroup as group_error:  # the client sees the stage's own error, not a group of them
            raise group_error.exceptions[0] from None
        vision_out = dict(zip(visual, v.result() if v else []))
        audio_out = dict(zip(sounds, a.result() if a else []))
        out = []
        for i, d in enumerate(decoded):
            if d.vision is None:
                out.append(EncodedMedia(audio_out[i]))
            else:
                out.append(EncodedMedia(vision_out[i].merged, vision_out[i].deepstack, audio_out.get(i)))
        return out


def thinker_media(spans: list[MediaSpan], decoded: list[DecodedMedia], encoded: list[EncodedMedia]
                  ) -> tuple[list[thinker_pb2.MediaSpan], dict[str, torch.Tensor]]:
    """The thinker's media spans and the tensors named as its contract says ("media.<i>.embeddings", ... for the i-th
    span). An item laid out as several spans (a Qwen3.5 video, one per frame) gives each span its rows, in order, and
    a one-frame grid."""
    pbs, tensors = [], {}
    rows_used: dict[int, int] = {}
    for i, span in enumerate(spans):
        d, e = decoded[span.index], encoded[span.index]
        first = rows_used.get(span.index, 0)
        rows_used[span.index] = first + span.length
        frame = slice(first, first + span.length)
        grid = list(d.vision.grid_thw) if d.vision else []
        content_hash = d.content_hash
        if d.timestamps:
            grid[0] = 1
            content_hash = f"{d.content_hash}#{first // span.length}"
        pbs.append(thinker_pb2.MediaSpan(kind=_PB_KIND[span.kind], offset=span.start, length=span.length,
                                         grid_thw=grid, second_per_grid=d.second_per_grid, content_hash=content_hash,
                                         audio_length=d.track_tokens))
        tensors[f"media.{i}.embeddings"] = e.embeddings if not d.timestamps else e.embeddings[frame]
        for k, level in enumerate(e.deepstack):
            tensors[f"media.{i}.deepstack.{k}"] = level if not d.timestamps else level[frame]
        if e.track is not None:
            tensors[f"media.{i}.audio_embeddings"] = e.track
    return pbs, tensors

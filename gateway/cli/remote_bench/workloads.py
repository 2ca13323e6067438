"""The workloads of docs/benchmarks.md: text->text, image->text, video->text (60 s at 2 fps, 448x448),
audio->text and text->speech, each request's input made from its index (distinct media per request, so no encoder
or prefix cache serves a repeat)."""
from __future__ import annotations

import base64
import io
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from omnimesh import Audio, Image, Message, Video

QUESTIONS = ("What is the capital of France?", "Why is the sky blue?", "How do vaccines train the immune system?",
             "Name three uses of copper.", "What causes ocean tides?", "Explain photosynthesis in simple terms.",
             "Who wrote the Odyssey?", "How does a refrigerator keep food cold?")
SPOKEN = ("Tell me a short fact about the moon.", "Describe a sunny morning in one sentence.",
          "Give me one tip for learning a language.", "Say something kind about rainy days.")
IMAGE_PROMPT = "Describe this image."
VIDEO_PROMPT = "What happens in this video?"
VIDEO_SECONDS, VIDEO_FPS, VIDEO_SIZE = 60, 2, 448  # the peers' video->text clip
AUDIO_PROMPT = "Transcribe the speech in this audio clip."
IMAGE_SIZE = (640, 480)
AUDIO_SECONDS = 5.0
AUDIO_RATE = 16_000


@dataclass(frozen=True)
class Request:
    """One request's input: a text, at most one media item, and whether the answer is spoken."""

    text: str
    media: Image | Audio | Video | None = None
    speak: bool = False

    def messages(self) -> list[Message]:
        return [Message.user(*([self.media] if self.media else []), self.text)]

    def openai_messages(self) -> list[dict]:
        """The same message as OpenAI chat content parts (media as data URLs of their MIME type / base64)."""
        parts: list[dict] = []
        if isinstance(self.media, Image):
            url = f"data:{self.media.mime_type or 'image/jpeg'};base64,{base64.b64encode(self.media.data).decode()}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(self.media, Video):
            url = f"data:{self.media.mime_type or 'video/mp4'};base64,{base64.b64encode(self.media.data).decode()}"
            parts.append({"type": "video_url", "video_url": {"url": url}})
        elif isinstance(self.media, Audio):
            parts.append({"type": "input_audio",
                          "input_audio": {"data": base64.b64encode(self.media.data).decode(), "format": "wav"}})
        return [{"role": "user", "content": [*parts, {"type": "text", "text": self.text}]}]


def text_request(index: int) -> Request:
    return Request(f"Question {index}: {QUESTIONS[index % len(QUESTIONS)]}")


def image_request(index: int) -> Request:
    return Request(IMAGE_PROMPT, Image(photo_like_jpeg(index), "image/jpeg"))


def video_request(index: int) -> Request:
    return Request(VIDEO_PROMPT, Video(moving_mp4(index), "video/mp4"))


def audio_request(index: int) -> Request:
    return Request(AUDIO_PROMPT, Audio(speech_like_wav(index), "audio/wav"))


def speech_request(index: int) -> Request:
    return Request(f"{SPOKEN[index % len(SPOKEN)]} (request {index})", speak=True)


WORKLOADS: dict[str, Callable[[int], Request]] = {"text": text_request, "image": image_request,
                                                  "video": video_request, "audio": audio_request,
                                                  "speech": speech_request}
# Workloads whose inputs take about a second each to make: made ahead of each level, on every core.
SLOW_TO_MAKE = frozenset({"video"})
# What each workload needs the deployment to take in and answer in (gRPC Info's modalities).
NEEDS: dict[str, tuple[str, str]] = {"text": ("text", "text"), "image": ("image", "text"),
                                     "video": ("video", "text"), "audio": ("audio", "text"),
                                     "speech": ("text", "audio")}


def photo_like_jpeg(seed: int) -> bytes:
    """A 640x480 JPEG with smooth gradients, soft blobs and grain (photo-like entropy, not flat colour)."""
    from PIL import Image as PILImage

    rng = np.random.default_rng(seed)
    w, h = IMAGE_SIZE
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([x / w, y / h, 1 - x / w], axis=-1) * rng.uniform(80, 200, size=3)  # [H, W, 3]
    for _ in range(6):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(30, 160)
        img += np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))[..., None] * rng.uniform(-90, 90, size=3)
    img += rng.normal(0, 6, size=img.shape)
    buf = io.BytesIO()
    PILImage.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def moving_mp4(seed: int, seconds: int = VIDEO_SECONDS, fps: int = VIDEO_FPS, size: int = VIDEO_SIZE) -> bytes:
    """An H.264 clip of `seconds` at `fps`, size x size: a photo-like scene panning a few pixels a frame, different
    per seed (every frame new pixels, as a camera gives). Cheap to make (one scene, rolled; the fastest preset):
    the client must keep up at c=32."""
    import av

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    scene = np.stack([x / size, y / size, 1 - x / size], axis=-1) * rng.uniform(60, 180, size=3)
    for _ in range(6):
        cx, cy, r = rng.uniform(0, size, 2).tolist() + [rng.uniform(30, 120)]
        scene += np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))[..., None] * rng.uniform(-90, 90, size=3)
    scene = np.clip(scene + rng.normal(0, 6, size=scene.shape), 0, 255).astype(np.uint8)
    step = rng.integers(2, 7, size=2)
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps, options={"preset": "ultrafast"})
        stream.height, stream.width, stream.pix_fmt = size, size, "yuv420p"
        for i in range(seconds * fps):
            pixels = np.roll(scene, (int(step[0]) * i, int(step[1]) * i), axis=(0, 1))
            container.mux(stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
        container.mux(stream.encode())
    return buf.getvalue()


def speech_like_wav(seed: int) -> bytes:
    """5 s of voiced, syllable-paced sound at 16 kHz (a gliding pitch with harmonics, 4 Hz envelope, noise) as WAV."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    t = np.arange(int(AUDIO_SECONDS * AUDIO_RATE)) / AUDIO_RATE
    pitch = rng.uniform(100, 220) * (1 + 0.1 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / AUDIO_RATE
    voiced = sum(np.sin(k * phase) / k for k in range(1, 6))
    envelope = np.clip(np.sin(2 * np.pi * rng.uniform(3, 5) * t), 0, None) ** 0.5
    samples = 0.25 * voiced * envelope + 0.01 * rng.normal(size=t.shape)
    buf = io.BytesIO()
    sf.write(buf, samples.astype(np.float32), AUDIO_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()

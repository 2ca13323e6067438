"""Audio content parts and video sound tracks -> 16 kHz mono float32 samples, with token counts and a content hash."""
from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import av
import numpy as np
import soundfile as sf
import soxr

from gateway.media.wav import parse_wav, read_wav
from runtime.errors import InvalidArgument
from runtime.audio_lengths import HOP_LENGTH, audio_token_count, mel_frame_count

TARGET_RATE = 16_000
DEFAULT_MAX_SECONDS = 600.0
MIN_SAMPLES = 400  # one 25 ms STFT window at 16 kHz; the log-mel front end needs more than half of it
FORMATS = "WAV, FLAC, OGG (Vorbis, Opus), MP3, M4A (AAC, ALAC)"
# Codecs accepted from containers soundfile cannot read (M4A/MP4, MKV, WebM ...): the formats we promise, no more.
PYAV_CODECS = frozenset({"aac", "alac", "mp3", "mp3float", "opus", "libopus", "vorbis", "flac"})
PYAV_CODEC_PREFIXES = ("pcm_",)


@dataclass(frozen=True)
class DecodedAudio:
    samples: np.ndarray  # float32 [n], mono, TARGET_RATE
    num_mel_frames: int  # log-mel frames the audio stage will make (n // 160)
    token_count: int  # `<|audio_pad|>` positions the thinker reserves for it
    content_hash: str  # sha256 of the samples' bytes: equal audio in any container hashes equal (prefix cache key)

    @property
    def seconds(self) -> float:
        return self.samples.shape[0] / TARGET_RATE


def decode_audio(data: bytes, field: str, max_seconds: float = DEFAULT_MAX_SECONDS,
                 min_samples: int = 0) -> DecodedAudio:
    """Decode an audio file; bad input raises `InvalidArgument(field, ...)`: empty, undecodable, unsupported codec,
    or longer than `max_seconds`. A clip shorter than `min_samples` is zero-padded to it (Qwen3-ASR's extractor
    pads clips under 0.5 s so; the padding is heard and counted as audio tokens)."""
    if not data:
        raise InvalidArgument(field, "audio is empty (0 bytes); send a non-empty audio file")
    try:
        samples, rate = _decode_soundfile(data, field, max_seconds)
    except (sf.LibsndfileError, RuntimeError, TypeError):  # not a libsndfile format: M4A and other containers
        decoded = _decode_pyav(data, field, max_seconds, video=False)
        assert decoded is not None  # for audio, a missing stream raises instead
        samples, rate = decoded
    return _finish(samples, rate, field, min_samples)


def extract_video_audio(data: bytes, field: str, max_seconds: float = DEFAULT_MAX_SECONDS) -> DecodedAudio | None:
    """The sound track of a video file, or None when it has none; a track that is bad raises like `decode_audio`."""
    decoded = _decode_pyav(data, field, max_seconds, video=True)
    return None if decoded is None else _finish(*decoded, field)


def _finish(samples: np.ndarray, rate: int, field: str, min_samples: int = 0) -> DecodedAudio:
    """samples: [frames, channels] float32 at `rate` -> mono, 16 kHz, checked."""
    if not np.isfinite(samples).all():
        raise InvalidArgument(field, "audio has NaN or infinite samples; send finite PCM")
    mono = samples.mean(axis=1, dtype=np.float32) if samples.shape[1] > 1 else samples[:, 0]
    mono = resample(mono, rate, TARGET_RATE).astype(np.float32, copy=False)
    if mono.shape[0] < MIN_SAMPLES:
        raise InvalidArgument(field, f"audio is empty or too short ({mono.shape[0] / TARGET_RATE * 1000:.1f} ms); "
                                     f"send at least {MIN_SAMPLES * 1000 // TARGET_RATE} ms")
    if mono.shape[0] < min_samples:
        mono = np.pad(mono, (0, min_samples - mono.shape[0]))
    mono = np.ascontiguousarray(mono)
    frames = mel_frame_count(mono.shape[0], HOP_LENGTH)
    digest = hashlib.sha256(mono.astype("<f4", copy=False).tobytes()).hexdigest()
    return DecodedAudio(mono, frames, audio_token_count(frames), digest)


def _too_long(field: str, seconds: float, max_seconds: float) -> InvalidArgument:
    return InvalidArgument(field, f"audio lasts more than {max_seconds:g} s (at least {seconds:.1f} s); "
                                  f"send at most {max_seconds:g} s")


def _decode_soundfile(data: bytes, field: str, max_seconds: float) -> tuple[np.ndarray, int]:
    """WAV, FLAC, OGG and MP3 through libsndfile, reading at most one frame past the cap; PCM and float WAV read
    by numpy instead (wav.py says why)."""
    if (wav := parse_wav(data)) is not None:
        limit = int(max_seconds * wav.rate)
        if wav.frames > limit:
            raise _too_long(field, wav.seconds, max_seconds)
        return read_wav(data, wav, limit), wav.rate
    with sf.SoundFile(io.BytesIO(data)) as f:
        rate = f.samplerate
        limit = int(max_seconds * rate)
        samples = f.read(limit + 1, dtype="float32", always_2d=True)  # [frames, channels]
    if samples.shape[0] > limit:
        raise _too_long(field, samples.shape[0] / rate, max_seconds)
    return samples, rate


def _decode_pyav(data: bytes, field: str, max_seconds: float, video: bool) -> tuple[np.ndarray, int] | None:
    """Any container FFmpeg opens; only the first audio stream, only the promised codecs."""
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.error.FFmpegError, ValueError, UnicodeDecodeError) as e:
        kind = "video" if video else f"audio ({FORMATS})"
        raise InvalidArgument(field, f"cannot decode the {kind}: {e}") from None
    with container:
        if not container.streams.audio:
            if video:
                return None
            raise InvalidArgument(field, f"the file has no audio stream; send one of {FORMATS}")
        stream = container.streams.audio[0]
        codec = stream.codec_context.name
        if codec not in PYAV_CODECS and not codec.startswith(PYAV_CODEC_PREFIXES):
            raise InvalidArgument(field, f"audio codec {codec!r} is not supported; send one of {FORMATS}")
        return _read_frames(container, stream, field, max_seconds)


def _read_frames(container: av.container.InputContainer, stream: av.AudioStream, field: str,
                 max_seconds: float) -> tuple[np.ndarray, int]:
    rate = stream.codec_context.sample_rate
    if container.duration is not None and container.duration / av.time_base > max_seconds + 1.0:
        raise _too_long(field, container.duration / av.time_base, max_seconds)  # before decoding anything
    to_float = None
    chunks: list[np.ndarray] = []
    total = 0
    try:
        for frame in container.decode(stream):
            if to_float is None:  # sample format only, same rate and layout: resampling is ours
                to_float = av.AudioResampler(format="fltp", layout=frame.layout.name, rate=frame.sample_rate)
                rate = frame.sample_rate
            total += _append_planar(chunks, to_float.resample(frame))
            if total > max_seconds * rate:
                raise _too_long(field, total / rate, max_seconds)
        if to_float is not None:
            _append_planar(chunks, to_float.resample(None))  # flush what the converter buffered
    except av.error.FFmpegError as e:
        raise InvalidArgument(field, f"the audio stream is corrupt: {e}") from None
    if not chunks:
        raise InvalidArgument(field, "audio is empty (no samples decoded); send a non-empty audio file")
    return np.concatenate(chunks).astype(np.float32, copy=False), rate


def _append_planar(chunks: list[np.ndarray], frames: list[av.AudioFrame]) -> int:
    for frame in frames:
        chunks.append(frame.to_ndarray().T)  # [n, channels]
    return sum(frame.samples for frame in frames)


def resample(x: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """1-D `x` at `rate_out`, in x's dtype: soxr's HQ (linear phase, delay compensated), the resampler
    `librosa.load(..., sr=16000)` uses in the reference processor's audio loader, and as librosa does, exactly
    ceil(len * rate_out / rate_in) samples (soxr's own count can be one short), so a clip's mel frames and audio
    tokens follow from its length alone."""
    if rate_in == rate_out:
        return x.copy()
    y = soxr.resample(x, rate_in, rate_out, quality="HQ")
    n_out = -(-x.shape[0] * rate_out // rate_in)
    return y[:n_out] if y.shape[0] >= n_out else np.pad(y, (0, n_out - y.shape[0]))


def header_seconds(data: bytes) -> float:
    """A file's duration from its header alone (0 when no header says): decides whether to decode it here."""
    if (wav := parse_wav(data)) is not None:
        return wav.seconds
    try:
        return float(sf.info(io.BytesIO(data)).duration)
    except (sf.LibsndfileError, RuntimeError, TypeError):
        try:
            with av.open(io.BytesIO(data), mode="r") as container:
                return container.duration / av.time_base if container.duration is not None else 0.0
        except (av.FFmpegError, ValueError, UnicodeDecodeError):
            return 0.0


HEADER_SLACK_S = 0.1  # a header may round a clip's length up by a frame or an encoder's padding


def header_token_count(data: bytes, max_seconds: float) -> int:
    """The thinker tokens a clip takes at least, from its header's duration alone (0 when no header says), so a
    prompt that cannot fit is refused before any sample is decoded."""
    seconds = min(header_seconds(data), max_seconds) - HEADER_SLACK_S
    return audio_token_count(mel_frame_count(int(seconds * TARGET_RATE))) if seconds > 0 else 0

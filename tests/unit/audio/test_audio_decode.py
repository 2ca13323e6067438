"""gateway.media.audio: every promised format decodes to 16 kHz mono; each kind of bad audio is INVALID_ARGUMENT."""
from __future__ import annotations

import io

import av
import numpy as np
import pytest
import soundfile as sf

from gateway.media.audio import TARGET_RATE, DecodedAudio, decode_audio, extract_video_audio
from runtime.errors import InvalidArgument
from runtime.audio_lengths import audio_token_count
from tests.unit.audio.audio_samples import pyav_bytes, soundfile_bytes, tone, video_only_bytes

FIELD = "messages[0].content[1].audio"

FORMATS = {
    "wav_stereo_44k": lambda: soundfile_bytes("WAV", "PCM_16", 44100, 1.0, channels=2),
    "flac_22k": lambda: soundfile_bytes("FLAC", "PCM_16", 22050, 1.0),
    "ogg_vorbis_16k": lambda: soundfile_bytes("OGG", "VORBIS", 16000, 1.0),
    "ogg_opus_48k": lambda: soundfile_bytes("OGG", "OPUS", 48000, 1.0),
    "mp3_44k": lambda: soundfile_bytes("MP3", "MPEG_LAYER_III", 44100, 1.0),
    "m4a_aac_44k": lambda: pyav_bytes("ipod", "aac", 44100, 1.0, channels=2),
    "m4a_alac_48k": lambda: pyav_bytes("ipod", "alac", 48000, 1.0),
}


def dominant_hz(samples: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.shape[0])))
    return float(np.fft.rfftfreq(samples.shape[0], 1 / TARGET_RATE)[spectrum.argmax()])


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_promised_format_decodes_to_16k_mono(name: str) -> None:
    decoded = decode_audio(FORMATS[name](), FIELD)
    assert isinstance(decoded, DecodedAudio)
    assert decoded.samples.dtype == np.float32 and decoded.samples.ndim == 1
    # Lossy codecs add encoder delay / padding (AAC priming ~2k samples at 44.1 kHz); the tone is 1 s.
    assert 0.99 <= decoded.seconds <= 1.1
    assert abs(dominant_hz(decoded.samples) - 440.0) < 3.0
    assert decoded.num_mel_frames == decoded.samples.shape[0] // 160
    assert decoded.token_count == audio_token_count(decoded.num_mel_frames)
    assert len(decoded.content_hash) == 64


def test_stereo_is_averaged_to_mono() -> None:
    decoded = decode_audio(soundfile_bytes("WAV", "FLOAT", 16000, 0.5, channels=2), FIELD)
    expected = tone(16000, 0.5, channels=2).mean(axis=1)
    np.testing.assert_allclose(decoded.samples, expected, atol=1e-7)


def test_content_hash_depends_on_samples_not_container() -> None:
    pcm16 = (tone(16000, 0.5) * 32767).astype(np.int16)  # the same integers in both files (writers round differently)
    files = {}
    for fmt in ("WAV", "FLAC"):
        buf = io.BytesIO()
        sf.write(buf, pcm16, 16000, format=fmt, subtype="PCM_16")
        files[fmt] = decode_audio(buf.getvalue(), FIELD)
    other = decode_audio(soundfile_bytes("WAV", "PCM_16", 16000, 0.6), FIELD)
    assert files["WAV"].content_hash == files["FLAC"].content_hash != other.content_hash


def test_empty_bytes_are_rejected_naming_the_field() -> None:
    with pytest.raises(InvalidArgument, match="empty") as err:
        decode_audio(b"", FIELD)
    assert err.value.violations[0].field == FIELD


def test_zero_samples_are_rejected_as_empty() -> None:
    buf = io.BytesIO()
    sf.write(buf, np.zeros((0, 1), np.float32), 16000, format="WAV")
    with pytest.raises(InvalidArgument, match="empty") as err:
        decode_audio(buf.getvalue(), FIELD)
    assert err.value.violations[0].field == FIELD


def test_too_short_audio_is_rejected() -> None:
    with pytest.raises(InvalidArgument, match="too short"):
        decode_audio(soundfile_bytes("WAV", "PCM_16", 16000, 0.01), FIELD)


def test_garbage_is_undecodable() -> None:
    with pytest.raises(InvalidArgument, match="cannot decode") as err:
        decode_audio(b"this is not audio at all" * 50, FIELD)
    assert err.value.violations[0].field == FIELD


def test_truncated_file_is_undecodable_or_short() -> None:
    data = pyav_bytes("ipod", "aac", 44100, 1.0)
    with pytest.raises(InvalidArgument):
        decode_audio(data[: len(data) // 8], FIELD)


def test_unsupported_codec_is_rejected() -> None:
    with pytest.raises(InvalidArgument, match="codec 'ac3' is not supported") as err:
        decode_audio(pyav_bytes("matroska", "ac3", 48000, 0.5), FIELD)
    assert err.value.violations[0].field == FIELD


def test_file_without_audio_stream_is_rejected() -> None:
    with pytest.raises(InvalidArgument, match="no audio stream"):
        decode_audio(video_only_bytes(), FIELD)


@pytest.mark.parametrize("make", [
    lambda: soundfile_bytes("WAV", "PCM_16", 16000, 2.0),  # soundfile path
    lambda: pyav_bytes("ipod", "aac", 16000, 2.0),  # PyAV path
])
def test_over_the_duration_cap_is_rejected(make) -> None:  # type: ignore[no-untyped-def]
    data = make()
    with pytest.raises(InvalidArgument, match="more than 1.5 s") as err:
        decode_audio(data, FIELD, max_seconds=1.5)
    assert err.value.violations[0].field == FIELD
    assert decode_audio(data, FIELD, max_seconds=3.0).seconds >= 2.0


def test_a_container_longer_than_the_cap_is_rejected_before_decoding() -> None:
    # the container's own duration (4 s) is named: the check ran on the header, not after decoding up to the cap
    with pytest.raises(InvalidArgument, match=r"more than 1.5 s \(at least 4\.\d s\)"):
        decode_audio(pyav_bytes("ipod", "aac", 16000, 4.0), FIELD, max_seconds=1.5)


def test_a_stream_corrupt_inside_is_rejected() -> None:
    data = bytearray(pyav_bytes("ipod", "aac", 16000, 2.0))
    rnd = np.random.default_rng(0)
    third = len(data) // 3
    data[third:2 * third] = rnd.integers(0, 256, third, dtype=np.uint8).tobytes()  # the header stays whole
    with pytest.raises(InvalidArgument, match="the audio stream is corrupt") as err:
        decode_audio(bytes(data), FIELD)
    assert err.value.violations[0].field == FIELD


def test_an_audio_track_without_samples_is_rejected_as_empty() -> None:
    buf = io.BytesIO()
    with av.open(buf, "w", format="matroska") as out:  # a video beside a FLAC track that never got a packet
        video = out.add_stream("mpeg4", rate=10)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        audio = out.add_stream("flac", rate=16000)
        audio.layout = "mono"
        for i in range(5):
            image = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
            image.pts = i
            out.mux(video.encode(image))
        out.mux(video.encode())
        out.mux(audio.encode())
    for decode in (decode_audio, extract_video_audio):
        with pytest.raises(InvalidArgument, match=r"audio is empty \(no samples decoded\)"):
            decode(buf.getvalue(), FIELD)


def test_non_finite_samples_are_rejected() -> None:
    samples = tone(16000, 0.5)
    samples[100] = np.nan
    buf = io.BytesIO()
    sf.write(buf, samples, 16000, format="WAV", subtype="FLOAT")
    with pytest.raises(InvalidArgument, match="NaN"):
        decode_audio(buf.getvalue(), FIELD)


def test_video_sound_track_is_extracted() -> None:
    decoded = extract_video_audio(pyav_bytes("mp4", "aac", 48000, 2.0, video=True), "messages[0].content[0].video")
    assert decoded is not None
    assert 1.99 <= decoded.seconds <= 2.1
    assert abs(dominant_hz(decoded.samples) - 440.0) < 3.0


def test_video_without_sound_track_gives_none() -> None:
    assert extract_video_audio(video_only_bytes(), "v") is None


def test_video_errors_name_the_field() -> None:
    with pytest.raises(InvalidArgument, match="cannot decode the video") as err:
        extract_video_audio(b"\x00" * 300, "messages[2].content[0].video")
    assert err.value.violations[0].field == "messages[2].content[0].video"
    with pytest.raises(InvalidArgument, match="more than 1 s"):
        extract_video_audio(pyav_bytes("mp4", "aac", 48000, 2.0, video=True), "v", max_seconds=1.0)

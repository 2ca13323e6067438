"""gateway/media/wav.py: PCM and float WAV read by numpy give libsndfile's samples bit for bit, and what it does not
recognise exactly goes back to libsndfile unchanged."""
from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile as sf

from runtime.errors import InvalidArgument
from gateway.media.audio import _finish, decode_audio, header_seconds
from gateway.media.footprint import audio_bytes
from gateway.media.wav import parse_wav, read_wav, wav_file

SUBTYPES = ["PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"]


def written(samples: np.ndarray, rate: int, subtype: str, fmt: str = "WAV") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def libsndfile(data: bytes) -> np.ndarray:
    return sf.read(io.BytesIO(data), dtype="float32", always_2d=True)[0]


def samples(frames: int = 999, channels: int = 2) -> np.ndarray:
    x = np.random.default_rng(frames).standard_normal((frames, channels)) * 0.4
    x[:2] = [[-1.0] * channels, [0.99999] * channels]  # both ends of the integer range
    return np.clip(x, -1, 1)


@pytest.mark.parametrize("fmt", ["WAV", "WAVEX"])
@pytest.mark.parametrize("subtype", SUBTYPES)
def test_every_pcm_and_float_width_reads_as_libsndfile_does(fmt: str, subtype: str) -> None:
    data = written(samples(), 22_050, subtype, fmt)
    layout = parse_wav(data)
    assert layout is not None and (layout.rate, layout.channels, layout.frames) == (22_050, 2, 999)
    got = read_wav(data, layout, max_frames=10**9)
    assert got.dtype == np.float32 and np.array_equal(got, libsndfile(data))


def test_full_range_int32_and_out_of_range_floats_match_too() -> None:
    ints = np.random.default_rng(1).integers(-2**31, 2**31, (500, 1), dtype=np.int64).astype(np.int32)
    data = written(ints, 16_000, "PCM_32")
    assert np.array_equal(read_wav(data, parse_wav(data), 10**9), libsndfile(data))
    loud = (np.random.default_rng(2).standard_normal((500, 1)) * 3).astype(np.float32)  # float WAV is not clipped
    data = written(loud, 16_000, "FLOAT")
    assert np.array_equal(read_wav(data, parse_wav(data), 10**9), libsndfile(data))


def test_chunks_before_the_samples_are_skipped_odd_sizes_padded() -> None:
    data = written(samples(300, 1), 16_000, "PCM_16")
    odd = b"LIST" + struct.pack("<I", 5) + b"INFOx" + b"\0"  # a 5-byte chunk and its pad byte
    spliced = data[:4] + struct.pack("<I", len(data) - 8 + len(odd)) + data[8:36] + odd + data[36:]
    assert data[36:40] == b"data"
    layout = parse_wav(spliced)
    assert layout is not None and layout.frames == 300
    assert np.array_equal(read_wav(spliced, layout, 10**9), libsndfile(data))


def test_a_file_of_many_chunks_is_left_to_libsndfile_after_a_bounded_walk() -> None:
    """200,000 empty chunks before the samples: the walk stops at MAX_CHUNKS (microseconds, as the gateway's event
    loop needs) and libsndfile, on a worker thread, reads the file; a few chunks still parse here."""
    import time

    from gateway.media.wav import MAX_CHUNKS

    data = written(samples(8000, 1), 16_000, "PCM_16")

    def spliced(n: int) -> bytes:
        junk = (b"junk" + struct.pack("<I", 0)) * n
        return data[:4] + struct.pack("<I", len(data) - 8 + len(junk)) + data[8:36] + junk + data[36:]

    crafted = spliced(200_000)
    t0 = time.perf_counter()
    assert parse_wav(crafted) is None
    assert time.perf_counter() - t0 < 0.05  # unbounded, the walk took 0.15 s here: the bound is tested, not the clock
    by_libsndfile = decode_audio(crafted, "audio", 60).samples
    assert np.array_equal(by_libsndfile, decode_audio(data, "audio", 60).samples)
    assert parse_wav(spliced(MAX_CHUNKS - 2)) is not None  # the fmt chunk, these, then data: within the walk


def test_reading_stops_at_max_frames() -> None:
    data = written(samples(1000, 2), 16_000, "PCM_16")
    assert np.array_equal(read_wav(data, parse_wav(data), 10), libsndfile(data)[:10])


def wav_with_format(code: int, bits: int = 16, channels: int = 1, block_align: int | None = None) -> bytes:
    block_align = channels * bits // 8 if block_align is None else block_align
    fmt = struct.pack("<HHIIHH", code, channels, 8000, 8000 * block_align, block_align, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", 4) + b"\0" * 4
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize("data", [
    b"", b"RIFF", b"not a wav file at all",
    written(samples(100, 1), 8000, "FLOAT").replace(b"RIFF", b"RF64", 1),  # 64-bit sizes: libsndfile's
    written(samples(100, 1), 8000, "ULAW"), written(samples(100, 1), 8000, "IMA_ADPCM"),  # compressed
    written(samples(100, 1), 8000, "PCM_16")[:-20],  # the data chunk says more than the file holds
    wav_with_format(1, bits=12), wav_with_format(1, bits=40), wav_with_format(3, bits=16),  # odd widths
    wav_with_format(1, block_align=3), wav_with_format(1, channels=0),  # a layout that does not add up
    b"RIFF\x20\0\0\0WAVEdata\x04\0\0\0\0\0\0\0",  # samples before any format
    b"RIFF\x10\0\0\0WAVEfmt \x04\0\0\0abcd",  # a format chunk too short to read
])
def test_anything_else_is_left_to_libsndfile(data: bytes) -> None:
    assert parse_wav(data) is None


def test_a_truncated_wav_still_decodes_through_libsndfile() -> None:
    data = written(samples(4000, 1), 16_000, "PCM_16")[:-1000]
    assert parse_wav(data) is None
    decoded = decode_audio(data, "audio")
    assert decoded.samples.shape[0] == libsndfile(data).shape[0]


def test_decode_headers_and_footprint_agree_with_libsndfile() -> None:
    data = written(samples(24_000, 2), 48_000, "PCM_16")
    decoded, before = decode_audio(data, "audio"), _finish(libsndfile(data), 48_000, "audio")
    assert decoded.samples.shape[0] == 8000 and np.array_equal(decoded.samples, before.samples)
    assert decoded.content_hash == before.content_hash  # the prefix cache's key for this clip is unchanged
    assert header_seconds(data) == sf.info(io.BytesIO(data)).duration == 0.5
    assert audio_bytes(data, 600.0) == int(0.5 * (48_000 * 2 + 16_000) * 4 * 2)


def test_a_wav_over_the_cap_is_refused_by_its_header_naming_the_field() -> None:
    data = written(samples(16_100, 1), 16_000, "PCM_16")
    with pytest.raises(InvalidArgument) as err:
        decode_audio(data, "messages[0].content[1].audio", max_seconds=1.0)
    assert str(err.value).startswith("messages[0].content[1].audio: audio lasts more than 1 s")


@pytest.mark.parametrize("dtype", [np.int16, np.float32])
def test_written_wavs_read_back_exactly_in_libsndfile_and_here(dtype: type) -> None:
    x = samples(777, 1)[:, 0]
    x = (x * 32767).astype(np.int16) if dtype is np.int16 else x.astype(np.float32)
    data = wav_file(x, 22_050)
    info = sf.info(io.BytesIO(data))
    assert (info.samplerate, info.channels, info.frames) == (22_050, 1, 777)
    assert info.subtype == ("PCM_16" if dtype is np.int16 else "FLOAT")
    ref = libsndfile(data)
    assert np.array_equal(read_wav(data, parse_wav(data), 10**9), ref)
    expected = x.astype(np.float32) / 32768 if dtype is np.int16 else x
    assert np.array_equal(ref[:, 0], expected)
    with pytest.raises(TypeError, match="int16 or float32"):
        wav_file(x.astype(np.float64), 16_000)

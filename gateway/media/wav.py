"""Uncompressed WAV (PCM 8/16/24/32-bit, IEEE float 32/64-bit) read straight from its bytes with numpy, and mono
16-bit or float WAV written the same way.

libsndfile reads an in-memory file through Python callbacks, each of which takes the GIL: at 130 Transcribe
requests/s on an H100 the gateway's decoding threads spent most of their time waiting for the GIL in those
callbacks, and kept the event loop waiting for it 15% of the time it ran (py-spy, bench/asr/NOTES.md). WAV, what a
speech client sends most, needs no codec: its header is a few chunks and its samples one array. Anything this does
not recognise exactly (RF64, compressed formats, a data chunk longer than the file, an odd block layout) returns
None and goes to libsndfile as before. The samples equal libsndfile's float conversion bit for bit
(tests/unit/gateway/test_wav.py).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
# numpy's type for a sample of each width (24-bit is widened to int32 in read_wav); libsndfile scales an integer
# sample x to float as x / 2^(bits - 1), 8-bit WAV being unsigned and centred on 128
_PCM_DTYPES = {1: "u1", 2: "<i2", 3: "<i4", 4: "<i4"}
_FLOAT_DTYPES = {4: "<f4", 8: "<f8"}
# chunks walked before the data chunk: a file with more (none that a recorder writes) goes to libsndfile, so a
# crafted one of millions of tiny chunks costs this walk microseconds (the gateway runs it on its event loop)
MAX_CHUNKS = 64


@dataclass(frozen=True)
class WavLayout:
    rate: int
    channels: int
    width: int  # bytes per sample
    is_float: bool
    data_offset: int
    frames: int

    @property
    def seconds(self) -> float:
        return self.frames / self.rate


def parse_wav(data: bytes) -> WavLayout | None:
    """The layout of a RIFF/WAVE file of PCM or float samples; None for anything else."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    fmt: tuple[int, int, int, int, int] | None = None
    pos = 12
    for _ in range(MAX_CHUNKS):
        if pos + 8 > len(data):
            break
        chunk, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if chunk == b"fmt ":
            fmt = _format(data[body:body + min(size, 40)])  # the fields read are in the first 40 bytes
            if fmt is None:
                return None
        elif chunk == b"data":
            if fmt is None or body + size > len(data):
                return None
            code, channels, rate, block_align, bits = fmt
            width = bits // 8
            if bits % 8 or block_align != channels * width:
                return None
            if (code == _PCM and width not in _PCM_DTYPES) or (code == _FLOAT and width not in _FLOAT_DTYPES):
                return None
            return WavLayout(rate, channels, width, code == _FLOAT, body, size // block_align)
        pos = body + size + (size & 1)  # chunks are padded to an even length
    return None


def _format(fmt: bytes) -> tuple[int, int, int, int, int] | None:
    """(format code, channels, rate, block align, bits) of a fmt chunk, the extensible format's sub-format read
    through; None when it is not PCM or float."""
    if len(fmt) < 16:
        return None
    code, channels, rate, _, block_align, bits = struct.unpack_from("<HHIIHH", fmt)
    if code == _EXTENSIBLE:
        if len(fmt) < 40:
            return None
        code = struct.unpack_from("<H", fmt, 24)[0]  # the sub-format GUID's first two bytes
    if code not in (_PCM, _FLOAT) or channels == 0 or rate == 0:
        return None
    return code, channels, rate, block_align, bits


def read_wav(data: bytes, layout: WavLayout, max_frames: int) -> np.ndarray:
    """At most `max_frames` frames as float32 [frames, channels], scaled as libsndfile scales them."""
    frames = min(layout.frames, max_frames)
    count = frames * layout.channels
    if layout.is_float:
        x = np.frombuffer(data, _FLOAT_DTYPES[layout.width], count, layout.data_offset).astype(np.float32)
    elif layout.width == 3:  # 24-bit: each sample's three bytes as the top of an int32
        raw = np.frombuffer(data, np.uint8, count * 3, layout.data_offset).reshape(count, 3)
        wide = np.zeros((count, 4), np.uint8)
        wide[:, 1:] = raw
        x = wide.view("<i4")[:, 0].astype(np.float32) * np.float32(2.0**-31)
    else:
        ints = np.frombuffer(data, _PCM_DTYPES[layout.width], count, layout.data_offset)
        if layout.width == 1:
            x = (ints.astype(np.float32) - np.float32(128)) * np.float32(2.0**-7)
        else:
            x = ints.astype(np.float32) * np.float32(2.0 ** (1 - 8 * layout.width))
    return x.reshape(frames, layout.channels)


def wav_file(samples: np.ndarray, rate: int) -> bytes:
    """Mono int16 (PCM) or float32 (IEEE float) samples as a WAV file: a 44-byte header and the samples as they are,
    with no libsndfile callback per write (what `read_wav` reads back exactly)."""
    if samples.dtype == np.int16:
        code, data = _PCM, samples.astype("<i2", copy=False).tobytes()
    elif samples.dtype == np.float32:
        code, data = _FLOAT, samples.astype("<f4", copy=False).tobytes()
    else:
        raise TypeError(f"wav_file takes int16 or float32 samples, not {samples.dtype}")
    width = samples.dtype.itemsize
    fmt = struct.pack("<HHIIHH", code, 1, rate, rate * width, width, 8 * width)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data))
    return b"RIFF" + struct.pack("<I", 4 + len(chunks) + len(data)) + b"WAVE" + chunks + data

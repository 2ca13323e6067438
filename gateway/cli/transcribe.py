"""`omnimesh transcribe`: one audio file to a Qwen3-ASR gateway; the transcript to stdout, or JSON lines per event."""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import soundfile as sf

from omnimesh import Audio, Client, OmnimeshError, Partial, TextDelta
from gateway.cli.chat import media_file
from gateway.cli.dial import add_tls_arguments, gateway_channel
from gateway.cli.event_lines import error_json, event_json

PIECE_S = 0.1  # how much audio each TranscribeStream chunk carries with --partial-every


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("transcribe", help="transcribe an audio file on a running Qwen3-ASR mesh")
    p.add_argument("file", type=media_file, help="audio file (WAV, FLAC, OGG, MP3, M4A)")
    p.add_argument("--addr", default="127.0.0.1:50051", help="gateway address (default 127.0.0.1:50051)")
    p.add_argument("--language", default="", help="force a language: ISO code (en, zh, ...) or name (English)")
    p.add_argument("--context", default="", help="context for the model: hotwords, names, domain terms")
    p.add_argument("--max-tokens", type=int, help="most transcript tokens")
    p.add_argument("--api-key", default=None, help="sent as `authorization: Bearer <key>`")
    p.add_argument("--timeout", type=float, default=None, help="deadline in seconds")
    p.add_argument("--json", action="store_true", help="one JSON object per event per line")
    p.add_argument("--partial-every", type=float, default=None, metavar="S",
                   help="send FILE's samples in real time, as a live recording would come (TranscribeStream), with "
                        "a partial transcript every S seconds of audio (at least 0.5)")
    add_tls_arguments(p)
    p.set_defaults(run=run)


def live_pcm(path: Path, piece_s: float = PIECE_S) -> tuple[Iterator[bytes], int]:
    """The file's samples (mixed to mono, 16-bit) as pieces that come at the pace they were recorded at."""
    samples, rate = sf.read(path, dtype="int16", always_2d=True)
    mono = samples.mean(axis=1).astype("<i2")  # [n]
    step = max(1, int(piece_s * rate))

    def pieces() -> Iterator[bytes]:
        for i in range(0, len(mono), step):
            time.sleep(piece_s)
            yield mono[i:i + step].tobytes()

    return pieces(), rate


def run(args: argparse.Namespace) -> int:
    """Text events as chat --json prints them, plus the language, the whole transcript and (--partial-every) the
    partial transcripts; without --json each partial is a line on stderr."""
    settings = {"language": args.language, "context": args.context, "max_tokens": args.max_tokens}
    with Client(channel=gateway_channel(args), api_key=args.api_key, timeout=args.timeout) as client:
        try:
            if args.partial_every is None:
                events = client.transcribe_stream(Audio.file(args.file), **settings)
            else:
                try:
                    pcm, rate = live_pcm(args.file)
                except sf.LibsndfileError as err:
                    print(f"error: {args.file}: cannot read its samples ({err})", file=sys.stderr)
                    return 1
                events = client.transcribe_pcm_stream(pcm, rate, partial_every_s=args.partial_every, **settings)
            for event in events:
                if args.json:
                    print(json.dumps(event_json(event), ensure_ascii=False), flush=True)
                elif isinstance(event, Partial):
                    print(f"[partial] {event.text}", file=sys.stderr, flush=True)
                elif isinstance(event, TextDelta):
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
        except OmnimeshError as err:
            if args.json:
                print(json.dumps(error_json(err)), flush=True)
            else:
                print(f"error: {err.code.name}: {err.message}", file=sys.stderr)
            return 1
    if not args.json:
        print()
    return 0

"""`omnimesh transcribe`: one audio file to a Qwen3-ASR gateway; the transcript to stdout, or JSON lines per event."""
from __future__ import annotations

import argparse
import json
import sys

from omnimesh import Audio, Client, OmnimeshError, TextDelta
from gateway.cli.chat import media_file
from gateway.cli.dial import add_tls_arguments, gateway_channel
from gateway.cli.event_lines import error_json, event_json


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
    add_tls_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Text events as chat --json prints them, plus the language and the whole transcript."""
    with Client(channel=gateway_channel(args), api_key=args.api_key, timeout=args.timeout) as client:
        try:
            for event in client.transcribe_stream(Audio.file(args.file), language=args.language,
                                                  context=args.context, max_tokens=args.max_tokens):
                if args.json:
                    print(json.dumps(event_json(event), ensure_ascii=False), flush=True)
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

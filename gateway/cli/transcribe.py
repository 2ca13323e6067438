"""`omnimesh transcribe`: one audio file to a Qwen3-ASR gateway; the transcript to stdout, or JSON lines per event."""
from __future__ import annotations

import argparse
import json
import mimetypes
import sys

import grpc

from omnimesh.v1 import omni_pb2, omni_pb2_grpc
from gateway.cli.chat import error_json, event_json, media_file
from gateway.cli.dial import add_tls_arguments, gateway_channel


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


def build_request(args: argparse.Namespace) -> omni_pb2.TranscribeRequest:
    audio = omni_pb2.Media(data=args.file.read_bytes(), mime_type=mimetypes.guess_type(args.file.name)[0] or "")
    request = omni_pb2.TranscribeRequest(audio=audio, language=args.language, context=args.context)
    if args.max_tokens is not None:
        request.sampling.max_tokens = args.max_tokens
    return request


def transcribe_event_json(ev: omni_pb2.TranscribeEvent) -> dict:
    """Text, usage, done and error as `chat --json` prints them; plus language and the whole transcript."""
    kind = ev.WhichOneof("event")
    if kind == "language":
        return {"type": "language", "language": ev.language}
    if kind == "transcript":
        return {"type": "transcript", "language": ev.transcript.language, "text": ev.transcript.text}
    as_chat = omni_pb2.ChatEvent()
    getattr(as_chat, kind).CopyFrom(getattr(ev, kind))
    return event_json(as_chat)


def run(args: argparse.Namespace) -> int:
    metadata = [("authorization", f"Bearer {args.api_key}")] if args.api_key else None
    failed = False
    with gateway_channel(args) as channel:
        try:
            for ev in omni_pb2_grpc.OmniStub(channel).Transcribe(build_request(args), metadata=metadata,
                                                                 timeout=args.timeout):
                kind = ev.WhichOneof("event")
                failed |= kind == "error"
                if args.json:
                    print(json.dumps(transcribe_event_json(ev), ensure_ascii=False), flush=True)
                elif kind == "text":
                    sys.stdout.write(ev.text.text)
                    sys.stdout.flush()
                elif kind == "error":
                    print(f"\nerror: {ev.error.code}: {ev.error.message}", file=sys.stderr)
        except grpc.RpcError as err:
            failed = True
            info = error_json(err)
            print(json.dumps(info) if args.json else f"error: {info['code']}: {info['message']}",
                  file=sys.stdout if args.json else sys.stderr, flush=True)
    if not args.json and not failed:
        print()
    return 1 if failed else 0

"""`omnimesh chat`: one streaming request to a gateway; text to stdout as it arrives, or JSON lines per event."""
from __future__ import annotations

import argparse
import base64
import json
import mimetypes
import os
import sys
import wave
from pathlib import Path

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from gateway.cli.dial import add_tls_arguments, gateway_channel


def media_file(value: str) -> Path:
    """An argparse type: a file the CLI can read, so a wrong path is a usage error naming it, not a traceback."""
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value}: no such file")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{value}: not readable")
    return path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chat", help="send one message to a running mesh and stream the answer")
    p.add_argument("text", help="the user message")
    p.add_argument("--addr", default="127.0.0.1:50051", help="gateway address (default 127.0.0.1:50051)")
    p.add_argument("--system", default=None, help="a system message before the user message")
    p.add_argument("--greedy", action="store_true", help="temperature 0 for the text and the speech")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--top-k", type=int)
    p.add_argument("--min-p", type=float)
    p.add_argument("--repetition-penalty", type=float)
    p.add_argument("--presence-penalty", type=float)
    p.add_argument("--frequency-penalty", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--stop-token-id", action="append", default=[], type=int, help="stop token id (repeatable)")
    p.add_argument("--ignore-eos", action="store_true", help="generate max_tokens whatever the model's end tokens")
    p.add_argument("--logprobs", type=int, default=0, metavar="N", help="return N top logprobs per token")
    p.add_argument("--image", action="append", default=[], type=media_file, help="image file (repeatable)")
    p.add_argument("--audio", action="append", default=[], type=media_file, help="audio file (repeatable)")
    p.add_argument("--video", action="append", default=[], type=media_file, help="video file (repeatable)")
    p.add_argument("--use-audio-in-video", action="store_true", help="also hear each video's sound track")
    p.add_argument("--speak", type=Path, help="ask for speech and write it to this WAV file")
    p.add_argument("--voice", default="", help="voice of the speech (e.g. ethan, chelsie, aiden)")
    p.add_argument("--speech-temperature", type=float, help="sampling temperature of the speech (default 0.9)")
    p.add_argument("--speech-seed", type=int, help="seed of the speech sampling")
    p.add_argument("--codes", action="store_true", help="also return codec codes (with --json)")
    p.add_argument("--api-key", default=None, help="sent as `authorization: Bearer <key>`")
    add_tls_arguments(p)
    p.add_argument("--timeout", type=float, default=None, help="deadline in seconds")
    p.add_argument("--json", action="store_true", help="one JSON object per event per line")
    p.set_defaults(run=run)


def build_request(args: argparse.Namespace) -> omni_pb2.ChatRequest:
    sampling = common_pb2.SamplingParams(stop=args.stop, stop_token_ids=args.stop_token_id, ignore_eos=args.ignore_eos,
                                         top_logprobs=args.logprobs, logprobs=args.logprobs > 0)
    if args.greedy:
        sampling.temperature = 0.0
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "seed", "max_tokens"):  # flags spelled as the SamplingParams fields
        value = getattr(args, name)
        if value is not None:
            setattr(sampling, name, value)
    content = []
    for kind in ("image", "audio", "video"):
        for path in getattr(args, kind):
            media = omni_pb2.Media(data=path.read_bytes(), mime_type=mimetypes.guess_type(path.name)[0] or "")
            content.append(omni_pb2.ContentPart(**{kind: media}))
    content.append(omni_pb2.ContentPart(text=args.text))
    messages = []
    if args.system:
        messages.append(omni_pb2.Message(role="system", content=[omni_pb2.ContentPart(text=args.system)]))
    messages.append(omni_pb2.Message(role="user", content=content))
    modalities = [omni_pb2.MODALITY_TEXT] + ([omni_pb2.MODALITY_AUDIO] if args.speak else [])
    request = omni_pb2.ChatRequest(messages=messages, sampling=sampling, output_modalities=modalities,
                                   voice=args.voice, return_codes=args.codes,
                                   use_audio_in_video=args.use_audio_in_video)
    speech_temperature = 0.0 if args.greedy else args.speech_temperature
    if speech_temperature is not None:
        request.speech_sampling.temperature = speech_temperature
    if args.speech_seed is not None:
        request.speech_sampling.seed = args.speech_seed
    return request


def event_json(ev: omni_pb2.ChatEvent) -> dict:
    kind = ev.WhichOneof("event")
    if kind == "text":
        out = {"type": "text", "text": ev.text.text, "token_ids": list(ev.text.token_ids)}
        if ev.text.logprobs:  # a token's text may be part of a character: its bytes decoded with replacement
            out["logprobs"] = [{"token_id": lp.token_id, "token": lp.token.decode("utf-8", "replace"),
                                "logprob": lp.logprob,
                                "top": [[t.token_id, t.logprob, t.token.decode("utf-8", "replace")] for t in lp.top]}
                               for lp in ev.text.logprobs]
        return out
    if kind == "audio":
        a = ev.audio
        out = {"type": "audio", "index": a.index, "sample_rate": a.sample_rate, "num_samples": len(a.pcm16) // 2,
               "num_frames": a.num_frames, "pcm16_base64": base64.b64encode(a.pcm16).decode("ascii")}
        if a.codes:
            out["codes"] = list(a.codes)
        return out
    if kind == "usage":
        u = ev.usage
        return {"type": "usage", "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                "cached_prompt_tokens": u.cached_prompt_tokens, "audio_seconds": u.audio_seconds}
    if kind == "done":
        return {"type": "done", "finish_reason": common_pb2.FinishReason.Name(ev.done.finish_reason)
                .removeprefix("FINISH_REASON_").lower()}
    return {"type": "error", "code": ev.error.code, "message": ev.error.message, "stage": ev.error.stage}


def error_json(err: grpc.RpcError) -> dict:
    out = {"type": "error", "code": err.code().name, "message": err.details() or ""}
    status = rpc_status.from_call(err)
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                out["field_violations"] = [{"field": v.field, "description": v.description}
                                           for v in bad.field_violations]
    return out


def run(args: argparse.Namespace) -> int:
    request = build_request(args)
    metadata = [("authorization", f"Bearer {args.api_key}")] if args.api_key else None
    pcm = bytearray()
    failed = False
    usage: dict = {}
    with gateway_channel(args) as channel:
        stub = omni_pb2_grpc.OmniStub(channel)
        try:
            for ev in stub.Chat(request, metadata=metadata, timeout=args.timeout):
                kind = ev.WhichOneof("event")
                if kind == "audio":
                    pcm += ev.audio.pcm16
                failed |= kind == "error"
                if args.json:
                    print(json.dumps(event_json(ev)), flush=True)
                elif kind == "text":
                    sys.stdout.write(ev.text.text)
                    sys.stdout.flush()
                elif kind == "usage":
                    usage = event_json(ev)
                elif kind == "error":
                    print(f"\nerror: {ev.error.code}: {ev.error.message}", file=sys.stderr)
        except grpc.RpcError as err:
            failed = True
            info = error_json(err)
            if args.json:
                print(json.dumps(info), flush=True)
            else:
                print(f"\nerror: {info['code']}: {info['message']}", file=sys.stderr)
    if not args.json:
        print()
        if usage:
            print(f"[{usage['prompt_tokens']} prompt + {usage['completion_tokens']} generated tokens]", file=sys.stderr)
    if args.speak and pcm:
        with wave.open(str(args.speak), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(24000)
            w.writeframes(bytes(pcm))
    return 1 if failed else 0

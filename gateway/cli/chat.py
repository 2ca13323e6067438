"""`omnimesh chat`: one streaming request to a gateway; text to stdout as it arrives, or JSON lines per event."""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omnimesh import (Audio, AudioDelta, AudioFailed, Client, Image, Message, OmnimeshError, ReasoningDelta, Sampling,
                      TextDelta, Usage)
from omnimesh import Done, Video, wav_bytes
from omnimesh.timing import first_token_ms
from gateway.cli.dial import add_tls_arguments, gateway_channel
from gateway.cli.event_lines import error_json, event_json


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


SAMPLING_FLAGS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                  "frequency_penalty", "seed", "max_tokens")  # spelled as the Sampling fields


def chat_call(args: argparse.Namespace) -> tuple[list[Message], dict[str, Any]]:
    """The messages and Client.chat_stream's keyword arguments the flags ask for."""
    flags = {name: getattr(args, name) for name in SAMPLING_FLAGS} | ({"temperature": 0.0} if args.greedy else {})
    sampling = Sampling(**flags, stop=tuple(args.stop), stop_token_ids=tuple(args.stop_token_id),
                        ignore_eos=args.ignore_eos, top_logprobs=args.logprobs, logprobs=args.logprobs > 0)
    media = [kind.file(path) for kind, paths in ((Image, args.image), (Audio, args.audio), (Video, args.video))
             for path in paths]
    messages = [*([Message.system(args.system)] if args.system else []), Message.user(*media, args.text)]
    speech = Sampling(temperature=0.0 if args.greedy else args.speech_temperature, seed=args.speech_seed)
    return messages, {"sampling": sampling, "speak": args.speak is not None, "voice": args.voice,
                      "speech_sampling": speech, "return_codes": args.codes,
                      "use_audio_in_video": args.use_audio_in_video}


def run(args: argparse.Namespace) -> int:
    messages, kwargs = chat_call(args)
    pcm, rate = bytearray(), 24_000
    failed = False
    usage: Usage | None = None
    timing: Mapping[str, float] = {}
    with Client(channel=gateway_channel(args), api_key=args.api_key, timeout=args.timeout) as client:
        try:
            for event in client.chat_stream(messages, **kwargs):
                if isinstance(event, AudioDelta):
                    pcm += event.pcm16
                    rate = event.sample_rate
                failed |= isinstance(event, AudioFailed)
                if args.json:
                    print(json.dumps(event_json(event)), flush=True)
                elif isinstance(event, ReasoningDelta):  # thoughts to stderr: stdout holds the answer alone
                    sys.stderr.write(event.text)
                    sys.stderr.flush()
                elif isinstance(event, TextDelta):
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
                elif isinstance(event, Usage):
                    usage = event
                elif isinstance(event, Done):
                    timing = event.timing
                elif isinstance(event, AudioFailed):
                    print(f"\nerror: {event.code}: {event.message}", file=sys.stderr)
        except OmnimeshError as err:
            failed = True
            if args.json:
                print(json.dumps(error_json(err)), flush=True)
            else:
                print(f"\nerror: {err.code.name}: {err.message}", file=sys.stderr)
    if not args.json:
        print()
        if usage:
            first = first_token_ms(timing)
            took = f"; the first after {first:.0f} ms, all in {timing['total']:.0f} ms" if first is not None else ""
            print(f"[{usage.prompt_tokens} prompt + {usage.completion_tokens} generated tokens{took}]",
                  file=sys.stderr)
    if args.speak and pcm:
        args.speak.write_bytes(wav_bytes(bytes(pcm), rate))
    return 1 if failed else 0

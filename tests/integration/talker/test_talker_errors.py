"""The talker's Speak rejects every malformed request with INVALID_ARGUMENT naming the field and the fix, and
stays healthy."""
from __future__ import annotations

import asyncio

import grpc
import pytest
import torch

from omnimesh.v1 import common_pb2, talker_pb2, thinker_pb2
from tests.integration.mesh_process import Proc
from tests.integration.talker.conftest import MAX_PROMPT_TOKENS
from tests.integration.talker.talker_calls import (
    HIDDEN, TEXT_PROMPT, conditioning, media_prompt, metric, speak, speak_paced, start, text, text_end, text_only,
)
from tests.parity.talker.talker_reference import ASSISTANT_HEADER, SYSTEM_TURN, user_turn
from tests.integration.status_checks import assert_invalid_argument

MP = media_prompt()
EMPTY = conditioning(torch.empty(0, 0))


# <|vision_start|><|audio_start|> video-pad "Hello" <|audio_end|><|vision_end|> in a user turn
AIV_PROMPT = [151644, 872, 198, 151652, 151669, 151656, 9707, 151670, 151653, 151645, 198, 151644, 77091, 198]
# <|vision_start|> video-pad <|vision_end|> in a user turn
VIDEO_PROMPT = [151644, 872, 198, 151652, 151656, 151653, 151645, 198, 151644, 77091, 198]


def _span(kind: int, offset: int, length: int, **fields: object) -> thinker_pb2.MediaSpan:
    return thinker_pb2.MediaSpan(kind=kind, offset=offset, length=length, **fields)


def _media(spans: list[thinker_pb2.MediaSpan], hidden: torch.Tensor = MP.hidden) -> list[talker_pb2.SpeakRequest]:
    return [start(MP.ids, media=spans), *conditioning(hidden), text([1]), text_end()]


def _sampling(**fields: object) -> list[talker_pb2.SpeakRequest]:
    return text_only(greedy=False, talker_sampling=common_pb2.SamplingParams(**fields))


AUDIO, IMAGE = thinker_pb2.MEDIA_KIND_AUDIO, thinker_pb2.MEDIA_KIND_IMAGE
S0, S1, S2 = MP.spans
LONG_PROMPT = SYSTEM_TURN + user_turn([5] * MAX_PROMPT_TOKENS) + ASSISTANT_HEADER

# case -> (messages, the field the error names, words its description must hold)
CASES: dict[str, tuple[list[talker_pb2.SpeakRequest], str, tuple[str, ...]]] = {
    "no messages": ([], "start", ("first message",)),
    "text before start": ([text([1]), start()], "start", ("first message",)),
    "unknown voice": (text_only(voice="Bob"), "start.voice", ("'Bob'", "ethan, aiden, chelsie")),
    "empty prompt": (text_only(prompt=[]), "start.prompt_token_ids", ("empty",)),
    "prompt id out of vocab": (text_only(prompt=[*TEXT_PROMPT[:-1], 10**7, *TEXT_PROMPT[-1:]]),
                               "start.prompt_token_ids", ("10000000", "[0, 152064)")),
    "no assistant header": (text_only(prompt=TEXT_PROMPT[:-3]), "start.prompt_token_ids", ("assistant",)),
    "assistant header cut short": (text_only(prompt=TEXT_PROMPT[:-1]), "start.prompt_token_ids",
                                   ("<|im_start|>assistant\\n", "3 tokens")),
    "user turns too long": (text_only(prompt=LONG_PROMPT), "start.prompt_token_ids",
                            (f"at most {MAX_PROMPT_TOKENS}", "max_prompt_tokens")),
    "span kind unset": (_media([S0, S1, _span(0, S2.offset, 4)]), "start.media[2].kind",
                        ("IMAGE, VIDEO, AUDIO or AUDIO_IN_VIDEO",)),
    "span past the prompt": (_media([S0, S1, _span(IMAGE, S2.offset, 400, grid_thw=[1, 4, 4])]), "start.media[2]",
                             ("past the prompt",)),
    "span over text tokens": (_media([S0, _span(AUDIO, S1.offset - 1, 5), S2]), "start.media[1]",
                              ("only audio placeholder tokens",)),
    "spans out of order": (_media([S1, S0, S2]), "start.media[1].offset", ("prompt order",)),
    "image grid disagrees": (_media([S0, S1, _span(IMAGE, S2.offset, 4, grid_thw=[1, 4, 8])]),
                             "start.media[2].grid_thw", ("[1, 4, 8]", "8 tokens", "span has 4")),
    "image without grid": (_media([S0, S1, _span(IMAGE, S2.offset, 4)]), "start.media[2].grid_thw", ("(t, h, w)",)),
    "placeholders without a span": (_media([S1, S2]), "start.media", ("cover 9 placeholders", "holds 12")),
    "conditioning rows": (_media(MP.spans, MP.hidden[:9]), "conditioning[talker.media_hidden]",
                          ("[9, 64]", "expected [12, 64]")),
    "conditioning width": (_media(MP.spans, torch.zeros(12, 32)), "conditioning[talker.media_hidden]",
                           ("[12, 32]", "expected [12, 64]")),
    "conditioning dtype": (_media(MP.spans, torch.zeros(12, HIDDEN, dtype=torch.int32)),
                           "conditioning[talker.media_hidden]", ("torch.int32",)),
    "conditioning name": ([start(), *conditioning(torch.empty(0, 0), name="media.0"), text([1]), text_end()],
                          "conditioning.name", ("'media.0'",)),
    "conditioning twice": ([start(), *EMPTY, *EMPTY, text([1]), text_end()], "conditioning", ("twice",)),
    "conditioning shape past the prompt": (  # refused at its first chunk, before any of its 256 MiB is buffered
        [start(MP.ids, media=MP.spans), talker_pb2.SpeakRequest(conditioning=common_pb2.Tensor(
            name="talker.media_hidden", dtype=common_pb2.DTYPE_FLOAT32, shape=[1 << 20, HIDDEN], data=b"\0" * 1024,
            chunk_index=0, chunk_count=256)), text([1]), text_end()],
        "conditioning[talker.media_hidden]", ("268435456 bytes exceed the limit of 6144",)),
    "conditioning incomplete": ([start(MP.ids, media=MP.spans), *conditioning(MP.hidden, chunk_bytes=1024)[:2],
                                 text([1])], "conditioning", ("incomplete",)),
    "conditioning missing": ([start(MP.ids, media=MP.spans), text([1]), text_end()], "conditioning",
                             ("before the first text", "12 media placeholders")),
    "conditioning after text": ([start(), text([1]), *EMPTY, text_end()], "conditioning",
                                ("before the first text",)),
    "text id out of vocab": ([start(), *EMPTY, text([1, 2, 200000]), text_end()], "text.token_ids",
                             ("200000", "[0, 152064)")),
    "message after text_end": ([start(), *EMPTY, text([1]), text_end(), text([2])], "text_end",
                               ("`text` message followed text_end",)),
    "two starts": ([start(), *EMPTY, text([1]), start()], "start", ("only one",)),
    "negative temperature": (_sampling(temperature=-1), "start.talker_sampling.temperature", ("-1",)),
    "top_p zero": (_sampling(top_p=0), "start.talker_sampling.top_p", ("(0, 1]",)),
    "repetition penalty zero": (_sampling(repetition_penalty=0), "start.talker_sampling.repetition_penalty",
                                ("> 0",)),
    "predictor top_k negative": (text_only(code_predictor_sampling=common_pb2.SamplingParams(top_k=-2)),
                                 "start.code_predictor_sampling.top_k", ("-2",)),
    "stop strings": (_sampling(stop=["x"]), "start.talker_sampling.stop", ("not used by the talker",)),
    "predictor seed": (text_only(code_predictor_sampling=common_pb2.SamplingParams(seed=3)),
                       "start.code_predictor_sampling.seed", ("not used by the talker", "temperature, top_k, top_p")),
    "audio-in-video span over text": ([start(AIV_PROMPT, media=[_span(thinker_pb2.MEDIA_KIND_AUDIO_IN_VIDEO, 5, 2,
                                                                      grid_thw=[1, 2, 2], audio_length=1)]),
                                       text_end()], "start.media[0]", ("only video and audio placeholders",)),
    "audio-in-video span without grid": ([start(AIV_PROMPT, media=[_span(thinker_pb2.MEDIA_KIND_AUDIO_IN_VIDEO, 5, 1,
                                                                         audio_length=1)]), text_end()],
                                         "start.media[0].grid_thw", ("(t, h, w)", "audio_in_video")),
    "video without seconds per grid": ([start(VIDEO_PROMPT, media=[_span(thinker_pb2.MEDIA_KIND_VIDEO, 4, 1,
                                                                         grid_thw=[1, 2, 2])]), text_end()],
                                       "start.media[0].second_per_grid", ("is 0.0", "> 0")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_speak_is_invalid_argument(talker_addr: str, case: str) -> None:
    messages, field, words = CASES[case]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        asyncio.run(speak_paced(talker_addr, messages))
    assert_invalid_argument(caught.value, field, words)


def test_the_stage_is_healthy_after_the_errors(talker_stage: Proc, talker_addr: str) -> None:
    spoken = asyncio.run(speak(talker_addr, text_only()))
    assert spoken.finished.num_frames > 0
    port = talker_stage.ports["metrics_port"]
    assert metric(port, "omnimesh_requests_running") == 0 and metric(port, "omnimesh_queue_depth") == 0


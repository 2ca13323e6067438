"""Qwen3-ASR through the whole mesh on loopback: `omnimesh up` starts only the audio and thinker stages, and
`omnimesh chat --audio F` gives transformers' greedy transcription tokens; vision and speech are UNIMPLEMENTED;
the HTTP front's /v1/audio/transcriptions (the openai package as client) answers through Transcribe."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import openai
import pytest
import soundfile as sf
import torch
import yaml

from tests.integration.mesh_process import OMNIMESH, Proc, start
from tests.integration.test_mesh_chat import chat_json
from tests.parity.audio.audio_reference import clip

MAX_NEW = 12
# Every stage enabled in the file: `up` itself must leave out the ones Qwen3-ASR has no use for.
ASR_MESH = {"gateway": {"stage_timeout_s": 10.0},
            "thinker": {"engine": {"kv_cache_bytes": 16 << 20, "max_model_len": 1024, "max_num_seqs": 8,
                                   "max_batch_tokens": 512, "token_flush_ms": 5.0}}}


@pytest.fixture(scope="module")
def asr_mesh(asr_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    from gateway.cli.up import MESH_PREFIX

    config = tmp_path_factory.mktemp("asr_mesh") / "mesh.yaml"
    config.write_text(yaml.safe_dump(ASR_MESH))
    proc = start([OMNIMESH, "up", "--model", str(asr_ckpt), "--port", "0", "--config", str(config)], MESH_PREFIX,
                 timeout=180)
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def addr(asr_mesh: Proc) -> str:
    return f"127.0.0.1:{asr_mesh.ports['gateway']['grpc_port']}"


@pytest.fixture(scope="module")
def wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("asr_audio") / "clip.wav"
    sf.write(path, clip(37920, seed=3), 16000, subtype="PCM_16")
    return path


def reference(asr_ckpt: Path, hf_asr, wav: Path, context: str | None) -> list[int]:
    from transformers import AutoProcessor

    samples, _ = sf.read(wav, dtype="float32")
    inputs = AutoProcessor.from_pretrained(asr_ckpt).apply_transcription_request(samples, prompt=context)
    with torch.inference_mode():
        out = hf_asr.generate(**inputs, max_new_tokens=MAX_NEW, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


def test_only_audio_and_thinker_run(asr_mesh: Proc) -> None:
    assert set(asr_mesh.ports) == {"audio", "thinker", "gateway"}


@pytest.mark.parametrize("context", [None, "Mr. Quilter, the middle classes"])
def test_chat_audio_greedy_equals_transformers(addr: str, asr_ckpt: Path, hf_asr, wav: Path,
                                               context: str | None) -> None:
    flags = ["--greedy", "--max-tokens", str(MAX_NEW), "--audio", str(wav)]
    code, events = chat_json(addr, "", *flags, *(["--system", context] if context else []))
    assert code == 0, events
    ours = [t for e in events if e["type"] == "text" for t in e["token_ids"]]
    assert ours == reference(asr_ckpt, hf_asr, wav, context)
    if context is None:  # 9 ChatML tokens around <|audio_start|>, 31 audio tokens for 2.37 s, <|audio_end|>
        assert events[-2]["prompt_tokens"] == 41


def test_vision_and_speech_are_unimplemented_naming_what_is_served(addr: str, wav: Path) -> None:
    code, events = chat_json(addr, "what is this", "--image", str(wav))
    assert code != 0 and events[-1]["code"] == "UNIMPLEMENTED"
    assert "it serves audio" in events[-1]["message"]
    code, events = chat_json(addr, "hi", "--speak", str(wav.with_suffix(".out.wav")))
    assert code != 0 and events[-1]["code"] == "UNIMPLEMENTED" and "audio output" in events[-1]["message"]


def transcribe_json(addr: str, *args: str) -> tuple[int, list[dict]]:
    import subprocess

    out = subprocess.run([OMNIMESH, "transcribe", "--addr", addr, "--json", *args], capture_output=True, text=True,
                         timeout=120)
    return out.returncode, [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def reference_answer(asr_ckpt: Path, hf_asr, wav: Path, language: str | None, context: str | None) -> list[int]:
    from transformers import AutoProcessor

    samples, _ = sf.read(wav, dtype="float32")
    inputs = AutoProcessor.from_pretrained(asr_ckpt).apply_transcription_request(samples, language=language,
                                                                                 prompt=context)
    with torch.inference_mode():
        out = hf_asr.generate(**inputs, max_new_tokens=MAX_NEW, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


@pytest.mark.parametrize("language, context", [("en", None), ("zh", "Quilter")])
def test_transcribe_forced_language_equals_transformers(addr: str, asr_ckpt: Path, hf_asr, wav: Path,
                                                        language: str, context: str | None) -> None:
    flags = ["--language", language, "--max-tokens", str(MAX_NEW), *(["--context", context] if context else [])]
    code, events = transcribe_json(addr, *flags, str(wav))
    assert code == 0, events
    kinds = [e["type"] for e in events]
    assert kinds[0] == "language" and kinds[-3:] == ["transcript", "usage", "done"]
    assert events[0]["language"] == {"en": "English", "zh": "Chinese"}[language]
    ours = [t for e in events if e["type"] == "text" for t in e["token_ids"]]
    assert ours == reference_answer(asr_ckpt, hf_asr, wav, language, context)
    assert events[-3]["text"] == "".join(e["text"] for e in events if e["type"] == "text").strip()


def test_transcribe_errors_name_the_field(addr: str, wav: Path, tmp_path: Path) -> None:
    code, events = transcribe_json(addr, "--language", "klingon", str(wav))
    assert code == 1 and events[-1]["code"] == "INVALID_ARGUMENT" and "ar, cs" in events[-1]["message"]
    assert events[-1]["field_violations"][0]["field"] == "language"
    not_audio = tmp_path / "x.wav"
    not_audio.write_bytes(b"not audio at all")
    code, events = transcribe_json(addr, str(not_audio))
    assert code == 1 and events[-1]["code"] == "INVALID_ARGUMENT"


def test_transcribe_trailer_says_where_the_time_went(addr: str, wav: Path) -> None:
    """The gateway's `omnimesh-timing` trailer (gateway/timeline.py): every phase in order, then the audio and thinker
    stages' own queue and compute times from their final messages, then the total the phases add up to."""
    import grpc

    from gateway.timeline import PHASES
    from omnimesh.timing import trailer_timing
    from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc

    async def call() -> dict[str, float]:
        async with grpc.aio.insecure_channel(addr) as channel:
            request = omni_pb2.TranscribeRequest(
                audio=omni_pb2.Media(data=wav.read_bytes(), mime_type="audio/wav"), language="en",
                sampling=common_pb2.SamplingParams(max_tokens=4, ignore_eos=True))
            stream = omni_pb2_grpc.OmniStub(channel).Transcribe(request, timeout=60)
            [_ async for _ in stream]
            return trailer_timing(await stream.trailing_metadata())

    timing = asyncio.run(call())
    stages = [f"{s}.{t}" for s in ("audio", "thinker") for t in ("queue", "compute")]
    assert list(timing) == [*PHASES, *stages, "total"] and all(v >= 0 for v in timing.values())
    assert sum(timing[p] for p in PHASES) == pytest.approx(timing["total"], abs=1.0)
    assert timing["thinker.compute"] <= timing["first_token"] + timing["rest"]


def test_short_clip_is_padded_as_transformers_pads_it(addr: str, asr_ckpt: Path, hf_asr, tmp_path: Path) -> None:
    short = tmp_path / "short.wav"
    sf.write(short, clip(4800, seed=5), 16000, subtype="PCM_16")  # 0.3 s: the extractor pads it to 0.5 s
    code, events = chat_json(addr, "", "--greedy", "--max-tokens", str(MAX_NEW), "--audio", str(short))
    assert code == 0, events
    assert [t for e in events if e["type"] == "text" for t in e["token_ids"]] == reference(asr_ckpt, hf_asr, short,
                                                                                           None)
    assert events[-2]["prompt_tokens"] == 10 + 7  # 0.5 s of mel frames (50) make 7 audio tokens


def test_info_names_the_family_and_what_is_served(addr: str) -> None:
    import subprocess

    out = subprocess.run([OMNIMESH, "info", "--addr", addr], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "(qwen3-asr)" in out.stdout.splitlines()[0]
    assert "in: text, audio   out: text" in out.stdout


def test_python_client_transcribes(addr: str, wav: Path) -> None:
    import omnimesh

    with omnimesh.Client(addr, timeout=60) as client:
        assert client.info().model_family == "qwen3-asr" and client.info().transcribes
        reply = client.transcribe(wav, language="English", max_tokens=4)
        assert reply.language == "English" and len(reply.token_ids) == 4 and reply.finish_reason == "length"
        assert reply.timing["first_token"] > 0 and reply.timing["total"] >= reply.timing["first_token"]
        try:
            client.transcribe(wav, language="xx")
        except omnimesh.InvalidArgument as err:
            assert err.field_violations[0].field == "language"
        else:
            raise AssertionError("an unknown language was accepted")


@pytest.fixture(scope="module")
def asr_api(addr: str) -> openai.OpenAI:
    """`omnimesh http` in front of the ASR gateway, with the openai package as its client."""
    from runtime.server import READY_PREFIX

    front = start([OMNIMESH, "http", "--gateway-addr", addr, "--port", "0"], READY_PREFIX, timeout=60)
    yield openai.OpenAI(api_key="none", base_url=f"http://127.0.0.1:{front.ports['http_port']}/v1", max_retries=0,
                        timeout=120)
    assert front.stop() == 0


def test_http_transcription_is_the_transcribe_call(asr_api: openai.OpenAI, addr: str, wav: Path) -> None:
    import omnimesh

    with omnimesh.Client(addr, timeout=60) as client:
        ours = client.transcribe(wav, language="en", max_tokens=MAX_NEW)
    file = ("clip.wav", wav.read_bytes(), "audio/wav")
    whole = asr_api.audio.transcriptions.create(model="any", file=file, language="en",
                                                extra_body={"max_tokens": MAX_NEW})
    assert whole.text == ours.text  # a chat turn asking for the transcript would have another prompt and answer
    assert whole.usage.input_tokens == ours.usage.prompt_tokens and whole.usage.output_tokens == MAX_NEW
    raw = asr_api.audio.transcriptions.with_raw_response.create(model="any", file=file, language="en",
                                                                response_format="text",
                                                                extra_body={"max_tokens": MAX_NEW})
    assert raw.parse().strip() == ours.text
    from omnimesh.timing import parse_timing  # the gateway's timing as the answer's Server-Timing header

    assert list(parse_timing(raw.headers["server-timing"]))[-1] == "total"


def test_http_transcription_streams_deltas_then_the_whole_text(asr_api: openai.OpenAI, wav: Path) -> None:
    file = ("clip.wav", wav.read_bytes(), "audio/wav")
    # A forced language: every token is transcript (a detected one is known only once the model wrote its header,
    # which this random model never does, so its whole answer would come at the end as one delta).
    events = list(asr_api.audio.transcriptions.create(model="any", file=file, stream=True, language="en",
                                                      prompt="Quilter", extra_body={"max_tokens": MAX_NEW}))
    deltas, done = events[:-1], events[-1]
    assert len(deltas) > 1 and {e.type for e in deltas} == {"transcript.text.delta"}
    assert done.type == "transcript.text.done" and done.usage.output_tokens <= MAX_NEW
    assert done.text == "".join(e.delta for e in deltas).strip()


def test_http_transcription_errors_name_the_openai_param(asr_api: openai.OpenAI, wav: Path) -> None:
    for stream in (False, True):  # a stream the gateway refuses is refused before any event
        with pytest.raises(openai.BadRequestError) as caught:
            asr_api.audio.transcriptions.create(model="any", file=("clip.wav", wav.read_bytes(), "audio/wav"),
                                                language="klingon", stream=stream)
        assert caught.value.body["param"] == "language" and "ar, cs" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        asr_api.audio.transcriptions.create(model="any", file=("clip.wav", b"not audio", "audio/wav"))
    assert caught.value.body["param"] == "file"


def test_http_transcription_past_its_deadline_ends_in_an_error_event(addr: str, wav: Path) -> None:
    from runtime.server import READY_PREFIX

    front = start([OMNIMESH, "http", "--gateway-addr", addr, "--port", "0", "--timeout", "1.0"], READY_PREFIX,
                  timeout=60)
    try:
        api = openai.OpenAI(api_key="none", base_url=f"http://127.0.0.1:{front.ports['http_port']}/v1",
                            max_retries=0)
        with api.audio.transcriptions.with_streaming_response.create(
                model="any", file=("clip.wav", wav.read_bytes(), "audio/wav"), language="en", stream=True,
                extra_body={"max_tokens": 900, "ignore_eos": True}) as answer:
            events = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")]
        assert any(e.get("type") == "transcript.text.delta" for e in events)  # text came before the deadline
        assert events[-1]["error"]["code"] == "deadline_exceeded"
    finally:
        assert front.stop() == 0


def test_transcribe_prints_the_text_or_the_error(addr: str, wav: Path) -> None:
    import subprocess

    _, events = transcribe_json(addr, "--language", "en", "--max-tokens", "4", str(wav))
    run = subprocess.run([OMNIMESH, "transcribe", "--addr", addr, "--language", "en", "--max-tokens", "4", str(wav)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout == "".join(e["text"] for e in events if e["type"] == "text") + "\n"
    run = subprocess.run([OMNIMESH, "transcribe", "--addr", addr, "--language", "xx", str(wav)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1 and run.stdout == "" and run.stderr.startswith("error: INVALID_ARGUMENT: ")


def paced_pcm(wav: Path, piece_s: float = 0.25, pause_s: float = 0.15):
    """The clip's samples as a recording sends them: a piece every `pause_s`."""
    import time

    samples, rate = sf.read(wav, dtype="int16")
    step = int(piece_s * rate)
    for i in range(0, len(samples), step):
        time.sleep(pause_s)
        yield samples[i:i + step].tobytes()


def test_streamed_pcm_gives_partials_then_the_whole_file_transcript(addr: str, wav: Path) -> None:
    import omnimesh

    with omnimesh.Client(addr, timeout=120) as client:
        events = list(client.transcribe_pcm_stream(paced_pcm(wav), 16_000, language="en", partial_every_s=0.5,
                                                   max_tokens=MAX_NEW))
        whole = client.transcribe(wav, language="en", max_tokens=MAX_NEW)
    partials = [e for e in events if isinstance(e, omnimesh.Partial)]
    assert partials and all(p.language == "English" for p in partials)
    final = events[len(partials):]  # every partial comes before the final events
    assert isinstance(final[0], omnimesh.Language) and isinstance(final[-1], omnimesh.Done)
    reply = omnimesh.TranscriptReply()
    for e in final:
        reply.add(e)
    assert (reply.text, reply.token_ids) == (whole.text, whole.token_ids)
    assert reply.usage.prompt_tokens == whole.usage.prompt_tokens  # (the second run reads the first's cached KV)


WINDOW_S, WINDOW_TOKENS = 8, 104  # the AuT's attention window (n_window_infer 800 frames) and its tokens


def test_streamed_partials_encode_only_new_windows_and_prefill_past_the_cache(asr_mesh: Proc, addr: str,
                                                                             tmp_path: Path) -> None:
    """Partial 0 hears 9 s (one finished 8 s window and a 1 s tail), partial 1 one more second: the second sends only
    the 2 s tail to the audio stage and the thinker finds the window's blocks cached; the final transcript is still
    the whole-file one."""
    import queue

    import numpy as np
    import omnimesh

    from tests.integration.mesh_process import metric_value, scrape

    rate = 16_000
    samples = (clip((WINDOW_S + 2) * rate, seed=5) * 32767).astype("<i2")
    seen = queue.Queue()

    def recording():  # the next piece once the gateway's partial of the last one came back: partials in lockstep
        yield samples[:(WINDOW_S + 1) * rate].tobytes()
        seen.get(timeout=60)
        yield samples[(WINDOW_S + 1) * rate:].tobytes()
        seen.get(timeout=60)

    def counters() -> tuple[float, float]:
        try:
            edge = metric_value(scrape(asr_mesh.ports["gateway"]["metrics_port"]), "omnimesh_edge_bytes_total",
                                from_stage="gateway", to_stage="audio")
        except KeyError:  # a labelled series appears with the first audio sent
            edge = 0.0
        hits = metric_value(scrape(asr_mesh.ports["thinker"]["metrics_port"]), "omnimesh_prefix_cache_hits_total")
        return edge, hits

    marks = [counters()]
    final = []
    with omnimesh.Client(addr, timeout=120) as client:
        for ev in client.transcribe_pcm_stream(recording(), rate, language="en", partial_every_s=0.5,
                                               max_tokens=MAX_NEW):
            if isinstance(ev, omnimesh.Partial):
                marks.append(counters())
                seen.put(ev)
            else:
                final.append(ev)
        wav = tmp_path / "ten_seconds.wav"
        sf.write(wav, samples, rate, subtype="PCM_16")
        whole = client.transcribe(wav, language="en", max_tokens=MAX_NEW)
    assert len(marks) == 3, "one partial per piece"
    edge = [b - a for (a, _), (b, _) in zip(marks, marks[1:])]
    hits = [b - a for (_, a), (_, b) in zip(marks, marks[1:])]
    sample_bytes = 4  # float32 samples on the wire to the audio stage
    assert edge[0] >= (WINDOW_S + 1) * rate * sample_bytes  # the first partial encodes all it heard
    assert 2 * rate * sample_bytes <= edge[1] < 3 * rate * sample_bytes  # the second only the 2 s tail
    block = 16  # thinker.engine.block_size (default): the window's rows, less the block the tail starts in
    assert hits[1] >= WINDOW_TOKENS - block and hits[1] > hits[0]
    reply = omnimesh.TranscriptReply()
    for e in final:
        reply.add(e)
    assert (reply.text, reply.token_ids) == (whole.text, whole.token_ids)
    assert np.array_equal(sf.read(wav, dtype="int16")[0], samples)


def test_streamed_pcm_errors_name_the_field(addr: str, wav: Path) -> None:
    import grpc
    import omnimesh

    with omnimesh.Client(addr, timeout=60) as client:
        with pytest.raises(omnimesh.InvalidArgument) as caught:
            list(client.transcribe_pcm_stream([b"\0\0"], 16_000, language="klingon"))
        assert caught.value.field_violations[0].field == "config.language"
        with pytest.raises(omnimesh.InvalidArgument) as caught:
            list(client.transcribe_pcm_stream([b"\0\0", b"\0"], 16_000))
        assert caught.value.field_violations[0].field == "pcm16" and "chunk 2" in caught.value.message
    with grpc.insecure_channel(addr) as channel:  # what the typed client cannot send: no settings, garbage bytes
        call = channel.stream_stream("/omnimesh.v1.Omni/TranscribeStream", request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
        for chunks, field in (([b""], "config"), ([b"\xff\xff\xff"], "request")):
            with pytest.raises(grpc.RpcError) as caught:
                list(call(iter(chunks), timeout=60))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and caught.value.details().startswith(field)


def merged_text(events: list[dict]) -> list[dict]:
    """Consecutive text events as one (their text and token ids joined)."""
    out: list[dict] = []
    for e in events:
        if e["type"] == "text" and out and out[-1]["type"] == "text":
            out[-1] = {**out[-1], "text": out[-1]["text"] + e["text"], "token_ids": out[-1]["token_ids"] + e["token_ids"]}
        else:
            out.append(dict(e))
    return out


def test_transcribe_partial_every_streams_the_file_as_a_recording(addr: str, wav: Path, tmp_path: Path) -> None:
    import subprocess

    flags = ["--language", "en", "--max-tokens", str(MAX_NEW)]
    _, whole = transcribe_json(addr, *flags, str(wav))
    code, events = transcribe_json(addr, *flags, "--partial-every", "0.5", str(wav))
    assert code == 0, events
    partials = [e for e in events if e["type"] == "partial"]
    for e in whole + events:
        e.pop("cached_prompt_tokens", None)  # a run after another of the same audio reads its cached KV
    # the stream's timing is its final transcript's, timed from the end of its audio (gateway/timeline.py)
    assert list(events[-1].pop("timing"))[:5] == ["admit", "decode", "prompt", "encode", "first_token"]
    whole[-1].pop("timing")
    # the same events, text deltas aside: how tokens batch into deltas follows the engine's timing (token_flush_ms)
    assert partials and events[:len(partials)] == partials and merged_text(events[len(partials):]) == merged_text(whole)
    not_audio = tmp_path / "x.wav"
    not_audio.write_bytes(b"not audio at all")
    run = subprocess.run([OMNIMESH, "transcribe", "--addr", addr, "--partial-every", "0.5", str(not_audio)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "cannot read its samples" in run.stderr

"""The OpenAI-compatible HTTP front, with the official `openai` package as its client, against a whole mesh (vision,
audio, talker) with API keys, started by `omnimesh up --http-port 0` on loopback."""
from __future__ import annotations

import base64
import io
import json
import time
import wave
from pathlib import Path

import av
import openai
import pytest
import yaml

from tests.integration.media_files import mp4, png, wav
from tests.integration.mesh_process import OMNIMESH, Proc, metric_value, scrape, start

KEY = "sk-http-test"
TOKENS = 4
SPEECH_TOKENS = 6


@pytest.fixture(scope="module")
def http_mesh(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    from gateway.cli.up import MESH_PREFIX

    cfg = tmp_path_factory.mktemp("http_mesh") / "mesh.yaml"
    cfg.write_text(yaml.safe_dump({
        "gateway": {"api_keys": [KEY]},
        "vision": {"enabled": True},
        "audio": {"enabled": True},
        "talker": {"enabled": True, "speech": {"max_frames": 24}},
        "thinker": {"engine": {"kv_cache_bytes": 16 << 20, "token_flush_ms": 5.0}}}))
    proc = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--http-port", "0", "--config", str(cfg)],
                 MESH_PREFIX, timeout=300)
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def api(http_mesh: Proc) -> openai.OpenAI:
    base = f"http://127.0.0.1:{http_mesh.ports['http']['http_port']}/v1"
    return openai.OpenAI(api_key=KEY, base_url=base, max_retries=0, timeout=120)


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def user(text: str = "Hi") -> list[dict]:
    return [{"role": "user", "content": text}]


GREEDY = {"temperature": 0.0, "max_tokens": TOKENS, "extra_body": {"ignore_eos": True}}


def test_models_lists_the_served_checkpoint(api: openai.OpenAI, demo_ckpt: Path) -> None:
    (model,) = api.models.list().data
    assert model.object == "model" and model.owned_by == "omnimesh" and model.id == demo_ckpt.name
    assert api.models.retrieve(model.id).id == model.id


def test_chat_completion_with_usage_and_logprobs(api: openai.OpenAI, demo_ckpt: Path) -> None:
    out = api.chat.completions.create(model="any", messages=user(), logprobs=True, top_logprobs=2, **GREEDY)
    choice = out.choices[0]
    assert out.object == "chat.completion" and out.id.startswith("chatcmpl-") and out.model == demo_ckpt.name
    assert choice.finish_reason == "length" and choice.message.role == "assistant"
    assert out.usage.completion_tokens == TOKENS and out.usage.total_tokens == out.usage.prompt_tokens + TOKENS
    lps = choice.logprobs.content
    assert len(lps) == TOKENS and all(len(lp.top_logprobs) == 2 for lp in lps)
    assert bytes(b for lp in lps for b in lp.bytes).decode("utf-8", "replace") == choice.message.content
    assert all(lp.token == bytes(lp.bytes).decode("utf-8", "replace") for lp in lps)


def test_streamed_chat_equals_the_whole_answer(api: openai.OpenAI) -> None:
    whole = api.chat.completions.create(model="any", messages=user(), **GREEDY).choices[0].message.content
    chunks = list(api.chat.completions.create(model="any", messages=user(), stream=True,
                                              stream_options={"include_usage": True}, **GREEDY))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == TOKENS


def test_image_audio_and_video_parts_as_data_urls(api: openai.OpenAI) -> None:
    content = [{"type": "image_url", "image_url": {"url": data_url("image/png", png())}},
               {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav()).decode(), "format": "wav"}},
               {"type": "video_url", "video_url": {"url": data_url("video/mp4", mp4())}},
               {"type": "text", "text": "What do you see and hear?"}]
    media = api.chat.completions.create(model="any", messages=[{"role": "user", "content": content}], **GREEDY)
    text = api.chat.completions.create(model="any", messages=user(content[-1]["text"]), **GREEDY)
    assert media.usage.completion_tokens == TOKENS
    assert media.usage.prompt_tokens > text.usage.prompt_tokens + 10  # the media's placeholders


def test_chat_with_audio_out_returns_a_wav_and_its_transcript(api: openai.OpenAI) -> None:
    out = api.chat.completions.create(model="any", messages=user("Say hi"), modalities=["text", "audio"],
                                      audio={"voice": "chelsie", "format": "wav"}, max_tokens=SPEECH_TOKENS, seed=1)
    message = out.choices[0].message
    assert message.content is None and message.audio.transcript
    with wave.open(io.BytesIO(base64.b64decode(message.audio.data))) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24_000, 1, 2) and w.getnframes() > 0


def test_streamed_audio_comes_as_pcm16_deltas_with_the_transcript(api: openai.OpenAI) -> None:
    chunks = list(api.chat.completions.create(model="any", messages=user("Say hi"), modalities=["text", "audio"],
                                              audio={"voice": "ethan", "format": "pcm16"}, stream=True,
                                              max_tokens=SPEECH_TOKENS, seed=1))
    audio = [c.choices[0].delta.audio for c in chunks if c.choices and getattr(c.choices[0].delta, "audio", None)]
    pcm = b"".join(base64.b64decode(a.data) for a in audio if a.data)
    assert len(pcm) > 0 and len(pcm) % 2 == 0
    assert "".join(a.transcript or "" for a in audio)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_speech_in_wav_and_mp3(api: openai.OpenAI) -> None:
    extra = {"max_tokens": SPEECH_TOKENS}
    wav_out = api.audio.speech.create(model="any", input="Hello there", voice="aiden", response_format="wav",
                                      extra_body=extra).content
    with wave.open(io.BytesIO(wav_out)) as w:
        assert w.getframerate() == 24_000 and w.getnframes() > 0
    mp3 = api.audio.speech.create(model="any", input="Hello there", voice="aiden", response_format="mp3",
                                  extra_body=extra).content
    with av.open(io.BytesIO(mp3)) as container:
        assert container.streams.audio[0].codec_context.name.startswith("mp3")


def test_speech_streams_pcm_as_it_is_spoken_and_as_sse(api: openai.OpenAI) -> None:
    args = {"model": "any", "input": "Hello there", "voice": "ethan", "extra_body": {"max_tokens": SPEECH_TOKENS}}
    with api.audio.speech.with_streaming_response.create(response_format="pcm", **args) as answer:
        pcm = b"".join(answer.iter_bytes())
    assert len(pcm) > 0 and len(pcm) % 2 == 0
    for fmt in ("pcm", "wav"):
        with api.audio.speech.with_streaming_response.create(response_format=fmt, stream_format="sse",
                                                             **args) as answer:
            events = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")]
        assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["output_tokens"] > 0
        assert {e["type"] for e in events[:-1]} == {"speech.audio.delta"}
        audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
        assert audio.startswith(b"RIFF") if fmt == "wav" else len(audio) % 2 == 0 and audio


def test_transcription_whole_and_streamed(api: openai.OpenAI) -> None:
    whole = api.audio.transcriptions.create(model="any", file=("clip.wav", wav(), "audio/wav"), temperature=0.0,
                                            extra_body={"max_tokens": TOKENS})
    assert isinstance(whole.text, str) and whole.text
    events = list(api.audio.transcriptions.create(model="any", file=("clip.wav", wav(), "audio/wav"), stream=True,
                                                  temperature=0.0, extra_body={"max_tokens": TOKENS}))
    assert events[-1].type == "transcript.text.done" and events[-1].text == whole.text
    assert "".join(e.delta for e in events[:-1]) == whole.text


def gateway_metric(mesh: Proc, name: str, **labels: str) -> float:
    """The sum of the gateway's `name` series with `labels` (KeyError while it has none)."""
    return metric_value(scrape(mesh.ports["gateway"]["metrics_port"]), name, **labels)


def gateway_cancelled(mesh: Proc) -> float:
    """Chat calls the gateway saw cancelled (0 before its first: the series exists once counted)."""
    try:
        return gateway_metric(mesh, "omnimesh_requests_total", code="CANCELLED")
    except KeyError:
        return 0.0


def ask_and_hang_up(api: openai.OpenAI, endpoint: str) -> None:
    """A request for a long answer whose client gives up after 0.5 s, before any of it was sent."""
    hasty = api.with_options(timeout=0.5)
    long = {"max_tokens": 4000}
    with pytest.raises(openai.APITimeoutError):
        if endpoint == "chat":
            hasty.chat.completions.create(model="any", messages=user(), extra_body={"ignore_eos": True, **long})
        elif endpoint == "chat-stream":  # the front still waits for the first event: ~10k prompt tokens (seconds of
            # prefill on CPU), led by a fresh id so that no earlier run's prefix is cached
            prompt = f"{time.time_ns()} " + "Hi " * 10_000
            for _ in hasty.chat.completions.create(model="any", messages=user(prompt), stream=True,
                                                   extra_body={"ignore_eos": True, **long}):
                pass
        elif endpoint == "speech":
            hasty.audio.speech.create(model="any", input="Hello there", voice="aiden", response_format="wav",
                                      extra_body=long)
        else:
            hasty.audio.transcriptions.create(model="any", file=("clip.wav", wav(), "audio/wav"), extra_body=long)


@pytest.mark.parametrize("endpoint", ["chat", "chat-stream", "speech", "transcription"])
def test_a_client_that_hangs_up_before_its_answer_stops_its_generation(api: openai.OpenAI, http_mesh: Proc,
                                                                       endpoint: str) -> None:
    cancelled = gateway_cancelled(http_mesh)
    t0 = time.monotonic()
    ask_and_hang_up(api, endpoint)
    # without the front's cancel, the gateway would keep the stream open until the answer's end, seconds away
    while gateway_metric(http_mesh, "omnimesh_requests_in_flight") > 0 and time.monotonic() - t0 < 1.5:
        time.sleep(0.02)
    assert gateway_metric(http_mesh, "omnimesh_requests_in_flight") == 0
    # and the call did reach the gateway, which saw it cancelled, not finished
    assert gateway_cancelled(http_mesh) == cancelled + 1


@pytest.mark.parametrize("fields, param", [
    ({"top_p": 7.0}, "top_p"),
    ({"messages": [{"role": "robot", "content": "Hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]}]},
     "messages[0].content[0].image_url.url"),
    ({"n": 2}, "n"),
    ({"modalities": ["text", "audio"], "audio": {"voice": "hal9000", "format": "pcm16"}}, "audio.voice"),
])
def test_bad_requests_are_400_in_the_openai_shape(api: openai.OpenAI, fields: dict, param: str) -> None:
    kwargs = {"model": "any", "messages": user(), "max_tokens": TOKENS} | fields
    for stream in (False, True):  # a stream the gateway refuses is refused before any event
        with pytest.raises(openai.BadRequestError) as caught:
            api.chat.completions.create(stream=stream, **kwargs)
        assert caught.value.status_code == 400
        assert caught.value.body["type"] == "invalid_request_error" and caught.value.body["param"] == param


def test_api_keys_pass_through_to_the_gateway(api: openai.OpenAI) -> None:
    wrong = api.with_options(api_key="sk-wrong")
    with pytest.raises(openai.AuthenticationError) as caught:
        wrong.chat.completions.create(model="any", messages=user(), max_tokens=TOKENS)
    assert caught.value.status_code == 401 and "not recognised" in caught.value.body["message"]
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


def test_audio_requests_the_front_refuses(api: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        api.audio.speech.create(model="any", input="Hi", voice="ethan", speed=2.0)
    assert caught.value.body["param"] == "speed"
    with pytest.raises(openai.BadRequestError) as caught:
        api.audio.transcriptions.create(model="any", file=("clip.wav", wav(), "audio/wav"), response_format="srt")
    assert caught.value.body["param"] == "response_format"


def test_a_deadline_is_504_before_the_stream_and_an_error_event_inside_it(http_mesh: Proc) -> None:
    from runtime.server import READY_PREFIX

    gateway = f"127.0.0.1:{http_mesh.ports['gateway']['grpc_port']}"
    front = start([OMNIMESH, "http", "--gateway-addr", gateway, "--port", "0", "--timeout", "1.5"], READY_PREFIX,
                  timeout=60)
    try:
        api = openai.OpenAI(api_key=KEY, base_url=f"http://127.0.0.1:{front.ports['http_port']}/v1", max_retries=0)
        long = {"model": "any", "messages": user(), "max_tokens": 4000, "extra_body": {"ignore_eos": True}}
        with pytest.raises(openai.InternalServerError) as caught:
            api.chat.completions.create(**long)
        assert caught.value.status_code == 504 and caught.value.body["code"] == "deadline_exceeded"
        chunks = []
        with pytest.raises(openai.APIError, match="[Dd]eadline"):
            for chunk in api.chat.completions.create(stream=True, **long):
                chunks.append(chunk)
        assert any(c.choices and c.choices[0].delta.content for c in chunks)  # text came before the error
    finally:
        assert front.stop() == 0


def test_omnimesh_http_serves_alone_in_front_of_a_gateway(http_mesh: Proc) -> None:
    from runtime.server import READY_PREFIX

    gateway = f"127.0.0.1:{http_mesh.ports['gateway']['grpc_port']}"
    front = start([OMNIMESH, "http", "--gateway-addr", gateway, "--port", "0", "--served-model-name", "omni"],
                  READY_PREFIX, timeout=60)
    try:
        api = openai.OpenAI(api_key=KEY, base_url=f"http://127.0.0.1:{front.ports['http_port']}/v1", max_retries=0)
        assert [m.id for m in api.models.list().data] == ["omni"]
        out = api.chat.completions.create(model="omni", messages=user(), **GREEDY)
        assert out.model == "omni" and out.usage.completion_tokens == TOKENS
        with pytest.raises(openai.NotFoundError) as caught:
            api.models.retrieve("gpt-4o")
        assert json.dumps(caught.value.body).count("model_not_found") == 1
    finally:
        assert front.stop() == 0


def pcm16_24k(seconds: float = 1.0) -> bytes:
    import numpy as np

    t = np.arange(int(seconds * 24_000)) / 24_000
    return (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2").tobytes()


def until_done(conn: object) -> list:
    events = []
    for event in conn:
        events.append(event)
        if event.type == "response.done":
            return events
    raise AssertionError(f"the connection ended before response.done; got {[e.type for e in events]}")


def test_realtime_turns_of_audio_in_and_speech_out(api: openai.OpenAI) -> None:
    with api.realtime.connect(model="any") as conn:
        assert conn.recv().type == "session.created"
        conn.session.update(session={"type": "realtime", "output_modalities": ["audio"], "max_output_tokens": 6,
                                     "audio": {"output": {"voice": "chelsie"}}})
        assert conn.recv().type == "session.updated"
        conn.input_audio_buffer.append(audio=base64.b64encode(pcm16_24k()).decode())
        conn.input_audio_buffer.commit()
        conn.response.create()
        events = until_done(conn)
        types = [e.type for e in events]
        assert types[0] == "input_audio_buffer.committed" and "response.created" in types
        pcm = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
        transcript = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")
        assert len(pcm) > 0 and transcript
        first = events[-1].response
        assert first.status in ("completed", "incomplete") and first.usage.output_tokens <= 6

        # A second, text-only turn: it reads the whole conversation, so its prompt is longer.
        conn.conversation.item.create(item={"type": "message", "role": "user",
                                            "content": [{"type": "input_text", "text": "And then?"}]})
        conn.response.create(response={"output_modalities": ["text"]})
        events = until_done(conn)
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text and [e.text for e in events if e.type == "response.output_text.done"] == [text]
        assert events[-1].response.usage.input_tokens > first.usage.input_tokens


def test_realtime_errors_are_events_and_the_session_goes_on(api: openai.OpenAI) -> None:
    with api.realtime.connect(model="any") as conn:
        assert conn.recv().type == "session.created"
        conn.input_audio_buffer.commit()
        error = conn.recv()
        assert error.type == "error" and error.error.code == "input_audio_buffer_commit_empty"
        conn.session.update(session={"type": "realtime", "output_modalities": ["text"], "temperature": -1.0})
        assert conn.recv().type == "session.updated"
        conn.conversation.item.create(item={"type": "message", "role": "user",
                                            "content": [{"type": "input_text", "text": "Hi"}]})
        conn.response.create()
        events = until_done(conn)
        (error,) = [e for e in events if e.type == "error"]
        assert error.error.type == "invalid_request_error" and error.error.param == "temperature"
        assert events[-1].response.status == "failed"
        conn.send({"type": "input_audio_buffer.bogus"})
        error = conn.recv()
        assert error.type == "error" and error.error.code == "unknown_event"


def test_realtime_answers_a_frame_that_is_not_json_and_goes_on(http_mesh: Proc) -> None:
    from websockets.sync.client import connect

    url = f"ws://127.0.0.1:{http_mesh.ports['http']['http_port']}/v1/realtime?model=any"
    with connect(url, additional_headers={"authorization": f"Bearer {KEY}"}) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
        for frame in ("{not json", "[1, 2]"):
            ws.send(frame)
            assert json.loads(ws.recv(timeout=30))["error"]["code"] == "invalid_json"
        ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
        assert json.loads(ws.recv(timeout=30))["type"] == "input_audio_buffer.cleared"


def test_realtime_cancel_ends_a_response_as_cancelled(api: openai.OpenAI) -> None:
    with api.realtime.connect(model="any") as conn:
        assert conn.recv().type == "session.created"
        conn.session.update(session={"type": "realtime", "output_modalities": ["text"], "max_output_tokens": 4000})
        assert conn.recv().type == "session.updated"
        conn.conversation.item.create(item={"type": "message", "role": "user",
                                            "content": [{"type": "input_text", "text": "Tell me a long story"}]})
        conn.response.create()
        for event in conn:
            if event.type == "response.output_text.delta":
                conn.response.cancel()
                break
        done = until_done(conn)[-1].response
        assert done.status == "cancelled" and done.status_details.reason == "client_cancelled"


def test_realtime_refuses_a_key_the_gateway_does_not_know(api: openai.OpenAI) -> None:
    import websockets

    with pytest.raises(websockets.exceptions.InvalidStatus):
        with api.with_options(api_key="sk-wrong").realtime.connect(model="any") as conn:
            conn.recv()


def test_omnimesh_http_on_a_port_in_use_says_so() -> None:
    import socket
    import subprocess

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run([OMNIMESH, "http", "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in run.stderr


def test_omnimesh_http_with_no_gateway_connections_says_so() -> None:
    import subprocess

    run = subprocess.run([OMNIMESH, "http", "--port", "0", "--gateway-connections", "0"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 1 and "--gateway-connections 0: at least 1" in run.stderr

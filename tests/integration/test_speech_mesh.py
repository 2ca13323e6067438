"""Speech out through the whole mesh: thinker tokens stream into the talker; text and audio come back in one stream."""
from __future__ import annotations

import asyncio
import base64
import json
import signal
import subprocess
import time
import wave
from pathlib import Path

import grpc
import pytest
import yaml

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from runtime.server import READY_PREFIX
from tests.integration.client import chat_error, chat_request
from tests.integration.conftest import python_module
from tests.integration.mesh_process import OMNIMESH, Proc, metric_value, scrape, start

SPEECH = [omni_pb2.MODALITY_TEXT, omni_pb2.MODALITY_AUDIO]


@pytest.fixture(scope="module")
def speech_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = tmp_path_factory.mktemp("speech") / "mesh.yaml"
    cfg.write_text(yaml.safe_dump({
        "talker": {"enabled": True, "speech": {"max_frames": 48}},
        "vision": {"enabled": False},
        "audio": {"enabled": False},
        "thinker": {"engine": {"kv_cache_bytes": 16 << 20, "token_flush_ms": 5.0}}}))
    return cfg


@pytest.fixture(scope="module")
def speech_mesh(demo_ckpt: Path, speech_config: Path) -> Proc:
    from gateway.cli.up import MESH_PREFIX

    proc = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--config", str(speech_config)],
                 MESH_PREFIX, timeout=240)
    yield proc
    assert proc.stop() == 0


def addr(mesh: Proc) -> str:
    return f"127.0.0.1:{mesh.ports['gateway']['grpc_port']}"


async def timed_events(target: str, request: omni_pb2.ChatRequest) -> list[tuple[float, omni_pb2.ChatEvent]]:
    async with grpc.aio.insecure_channel(target) as channel:
        t0 = time.monotonic()
        return [(time.monotonic() - t0, ev) async for ev in omni_pb2_grpc.OmniStub(channel).Chat(request)]


def test_speak_writes_a_valid_24khz_wav(speech_mesh: Proc, tmp_path: Path) -> None:
    out = tmp_path / "out.wav"
    run = subprocess.run([OMNIMESH, "chat", "--addr", addr(speech_mesh), "--speak", str(out), "--voice", "chelsie",
                          "--max-tokens", "24", "--seed", "1", "--json", "Tell me a story"],
                         capture_output=True, text=True, timeout=180)
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert run.returncode == 0, events
    with wave.open(str(out)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24_000, 1, 2)
        seconds = w.getnframes() / 24_000
    assert seconds > 0
    audio = [e for e in events if e["type"] == "audio"]
    assert [a["index"] for a in audio] == list(range(len(audio)))
    assert sum(a["num_samples"] for a in audio) == round(seconds * 24_000)
    with wave.open(str(out)) as w:  # each event carries its samples: together they are the file's
        assert b"".join(base64.b64decode(a["pcm16_base64"]) for a in audio) == w.readframes(w.getnframes())
    assert events[-2]["type"] == "usage" and abs(events[-2]["audio_seconds"] - seconds) < 1e-3
    assert events[-1]["type"] == "done" and events[-1]["finish_reason"] in ("stop", "length")
    # the gateway's timing (omnimesh/timing.py): a spoken answer's first audio, and the talker's own times
    timing = events[-1]["timing"]
    assert list(timing)[:7] == ["admit", "decode", "prompt", "encode", "first_token", "first_audio", "rest"], timing
    assert {"thinker.queue", "talker.queue", "talker.compute", "total"} <= set(timing)


def test_first_audio_arrives_before_the_text_is_finished(speech_mesh: Proc) -> None:
    req = chat_request("Tell me a long story", common_pb2.SamplingParams(max_tokens=150, ignore_eos=True, seed=2),
                       output_modalities=SPEECH)
    events = asyncio.run(timed_events(addr(speech_mesh), req))
    first_audio = min(t for t, ev in events if ev.HasField("audio"))
    last_text = max(t for t, ev in events if ev.HasField("text"))
    assert first_audio < last_text
    assert [ev.sequence for _, ev in events] == list(range(len(events)))


def test_codes_come_with_the_audio_when_asked(speech_mesh: Proc) -> None:
    req = chat_request("Say hi", common_pb2.SamplingParams(max_tokens=12, seed=3), output_modalities=SPEECH,
                       return_codes=True)
    events = [ev for _, ev in asyncio.run(timed_events(addr(speech_mesh), req))]
    chunks = [ev.audio for ev in events if ev.HasField("audio")]
    assert chunks
    for chunk in chunks:
        assert chunk.num_code_groups == 16
        assert len(chunk.codes) == chunk.num_frames * 16
        assert all(0 <= c < 2048 for c in chunk.codes)


def test_unknown_voice_is_invalid_argument_listing_the_voices(speech_mesh: Proc) -> None:
    err = asyncio.run(chat_error(addr(speech_mesh), chat_request("hi", output_modalities=SPEECH, voice="hal9000")))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ethan" in err.details() and "chelsie" in err.details()


def test_concurrent_speech_requests_with_different_voices(speech_mesh: Proc) -> None:
    voices = ["ethan", "chelsie", "aiden"]

    async def all_of_them() -> list:
        reqs = [chat_request(f"Story {i}", common_pb2.SamplingParams(max_tokens=16, seed=i), output_modalities=SPEECH,
                             voice=v) for i, v in enumerate(voices)]
        return await asyncio.gather(*(timed_events(addr(speech_mesh), r) for r in reqs))

    for events in asyncio.run(all_of_them()):
        kinds = [ev.WhichOneof("event") for _, ev in events]
        assert "audio" in kinds and "error" not in kinds
        assert kinds[-1] == "done"


def test_cancel_stops_both_stages_and_frees_their_state(speech_mesh: Proc) -> None:
    thinker, talker = speech_mesh.ports["thinker"]["metrics_port"], speech_mesh.ports["talker"]["metrics_port"]

    async def scenario() -> None:
        async with grpc.aio.insecure_channel(addr(speech_mesh)) as channel:
            req = chat_request("Go on", common_pb2.SamplingParams(max_tokens=400, ignore_eos=True),
                               output_modalities=SPEECH)
            call = omni_pb2_grpc.OmniStub(channel).Chat(req)
            async for ev in call:
                if ev.HasField("audio"):
                    break
            call.cancel()

    asyncio.run(scenario())
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if (metric_value(scrape(thinker), "omnimesh_kv_usage_ratio") == 0.0
                and metric_value(scrape(talker), "omnimesh_requests_running") == 0.0):
            return
        time.sleep(0.1)
    pytest.fail("the thinker's KV or the talker's rows were not freed after the client cancelled")


def test_talker_dying_mid_stream_ends_only_the_audio(speech_mesh: Proc, demo_ckpt: Path, speech_config: Path) -> None:
    talker = start(python_module("services.talker", "--model", str(demo_ckpt), "--config", str(speech_config),
                                 "--port", "0", "--metrics-port", "-1"), READY_PREFIX, timeout=120)
    gateway = start(python_module("gateway", "--model", str(demo_ckpt), "--config", str(speech_config),
                                  "--port", "0", "--metrics-port", "-1",
                                  "--thinker-addr", f"127.0.0.1:{speech_mesh.ports['thinker']['grpc_port']}",
                                  "--talker-addr", f"127.0.0.1:{talker.ports['grpc_port']}"), READY_PREFIX, timeout=60)

    async def scenario() -> list[omni_pb2.ChatEvent]:
        events = []
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.ports['grpc_port']}") as channel:
            req = chat_request("Keep talking", common_pb2.SamplingParams(max_tokens=200, ignore_eos=True, seed=4),
                               output_modalities=SPEECH)
            async for ev in omni_pb2_grpc.OmniStub(channel).Chat(req, timeout=120):
                events.append(ev)
                if ev.HasField("audio") and talker.proc.poll() is None:
                    talker.proc.send_signal(signal.SIGKILL)
        return events

    try:
        events = asyncio.run(scenario())
    finally:
        talker.stop()
        assert gateway.stop() == 0
    errors = [ev.error for ev in events if ev.HasField("error")]
    assert len(errors) == 1 and errors[0].code == "UNAVAILABLE" and errors[0].stage == "talker"
    assert events[-1].HasField("done") and events[-1].done.finish_reason == common_pb2.FINISH_REASON_LENGTH
    assert sum(len(ev.text.token_ids) for ev in events if ev.HasField("text")) == 200


def test_greedy_speech_codes_through_the_mesh_equal_transformers(speech_mesh: Proc, hf_omni, demo_ckpt: Path,
                                                                 tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from tests.parity.talker.talker_reference import reference_speech

    text, max_text = "Tell me about cats", 12
    run = subprocess.run([OMNIMESH, "chat", "--addr", addr(speech_mesh), "--json", "--greedy", "--codes",
                          "--voice", "ethan", "--speak", str(tmp_path / "o.wav"), "--max-tokens", str(max_text), text],
                         capture_output=True, text=True, timeout=180)
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert run.returncode == 0, events
    ours_text = [t for e in events if e["type"] == "text" for t in e["token_ids"]]
    ours_codes = [c for e in events if e["type"] == "audio" for c in e["codes"]]
    tok = AutoTokenizer.from_pretrained(demo_ckpt)
    prompt = tok.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": text}]}],
                                     add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    ref = reference_speech(hf_omni, prompt, "ethan", eos=151645, max_text=max_text, max_frames=48)
    assert ours_text == ref.generated
    # The reference never speaks the thinker's last token when it stops on length (ours does): frames before the
    # text runs out are identical; compare those.
    frames = len(ref.spoken_text(151645)) - 2
    ref_codes = ref.codes.T.reshape(-1).tolist()  # (G, T) -> frame-major
    assert frames >= 8
    assert ours_codes[: frames * 16] == ref_codes[: frames * 16]

"""Qwen3-Omni Thinking and Captioner carry no talker: their demo checkpoints hold no talker / code2wav tensors and
load in transformers; `omnimesh up` leaves the talker out (though the mesh config enables it), the model answers in
text, and speech output is UNIMPLEMENTED."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from safetensors import safe_open

from gateway.cli.main import main
from tests.integration.mesh_process import OMNIMESH, Proc, start
from tests.integration.test_mesh_chat import chat_json

# Talker left enabled on purpose; vision and audio off to keep the test light on 2 cores.
MESH = {"vision": {"enabled": False}, "audio": {"enabled": False},
        "thinker": {"engine": {"kv_cache_bytes": 16 << 20, "max_model_len": 1024, "max_num_seqs": 4,
                               "max_batch_tokens": 256, "token_flush_ms": 5.0}}}


@pytest.fixture(scope="module", params=["thinking", "captioner"])
def variant(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp(request.param)
    assert main(["demo-checkpoint", "--model", f"qwen3-omni-{request.param}", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def mesh(variant: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    from gateway.cli.up import MESH_PREFIX

    config = tmp_path_factory.mktemp("silent_mesh") / "mesh.yaml"
    config.write_text(yaml.safe_dump(MESH))
    proc = start([OMNIMESH, "up", "--model", str(variant), "--port", "0", "--config", str(config)], MESH_PREFIX,
                 timeout=180)
    yield proc
    assert proc.stop() == 0


def test_checkpoint_has_no_talker_and_loads(variant: Path) -> None:
    from transformers import Qwen3OmniMoeForConditionalGeneration

    assert json.loads((variant / "config.json").read_text())["enable_audio_output"] is False
    with safe_open(str(variant / "model.safetensors"), "pt") as f:
        prefixes = {name.split(".")[0] for name in f.keys()}
    assert prefixes == {"thinker"}
    model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(variant)
    assert not model.has_talker


def test_mesh_answers_in_text_and_refuses_speech(mesh: Proc, variant: Path) -> None:
    """Thinking's template opens a `<think>` block that this random model never closes: all it says is reasoning,
    sent as its own events; the Captioner answers in text."""
    assert set(mesh.ports) == {"thinker", "gateway"}
    addr = f"127.0.0.1:{mesh.ports['gateway']['grpc_port']}"
    code, events = chat_json(addr, "Hello", "--max-tokens", "4")
    assert code == 0 and events[-1]["type"] == "done", events
    said = [e for e in events if e["type"] in ("text", "reasoning")]
    assert {e["type"] for e in said} == {"reasoning" if variant.name.startswith("thinking") else "text"}
    assert sum(len(e["token_ids"]) for e in said) == events[-2]["completion_tokens"] == 4
    code, events = chat_json(addr, "Hello", "--speak", "/dev/null")
    assert code == 1 and events[-1]["code"] == "UNIMPLEMENTED" and "no talker stage" in events[-1]["message"]


def test_openai_clients_read_the_reasoning_apart(mesh: Proc, variant: Path) -> None:
    """Through the HTTP front, a Thinking model's thoughts are `reasoning_content` (whole and streamed), never
    `content`."""
    if not variant.name.startswith("thinking"):
        pytest.skip("the Captioner does not reason")
    import openai

    from runtime.server import READY_PREFIX

    front = start([OMNIMESH, "http", "--gateway-addr", f"127.0.0.1:{mesh.ports['gateway']['grpc_port']}", "--port",
                   "0"], READY_PREFIX, timeout=60)
    try:
        api = openai.OpenAI(api_key="-", base_url=f"http://127.0.0.1:{front.ports['http_port']}/v1", max_retries=0)
        ask = {"model": "any", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "temperature": 0}
        whole = api.chat.completions.create(**ask).choices[0].message
        assert whole.content == "" and whole.reasoning_content  # the SDK keeps fields it does not know
        deltas = [c.choices[0].delta for c in api.chat.completions.create(**ask, stream=True) if c.choices]
        streamed = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
        assert streamed == whole.reasoning_content and not "".join(d.content or "" for d in deltas)
    finally:
        assert front.stop() == 0

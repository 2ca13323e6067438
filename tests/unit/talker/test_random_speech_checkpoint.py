"""The random-weight speech checkpoint (bench/talker/random_checkpoint.py), written at the demo dims by the code path
the GPU run takes: its names are the released layout's, and the stage loaders put every tensor where it was written."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors import safe_open

from bench.moe_routing import validate_routing_record
from bench.talker.bench_speech_mesh import RANDOM_WEIGHTS_MAX_FRAMES, mesh_stages, parse_args, write_random_checkpoint
from bench.talker.bench_speech_mesh import main as bench_main
from bench.talker.random_checkpoint import (checkpoint_bytes, real_speech_config, speech_checkpoint_specs,
                                            write_random_speech_checkpoint)
from runtime.checkpoint.demo_config import demo_config
from services.talker.model.load import load_talker_model
from services.thinker.model import ThinkerLM

DTYPE = torch.bfloat16


def read_tensors(ckpt: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for shard in sorted(ckpt.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            tensors.update({name: f.get_tensor(name) for name in f.keys()})
    return tensors


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, demo_ckpt: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    ckpt = tmp_path_factory.mktemp("random_speech")
    # small shards: the index must route each stage's loader to the right files
    nbytes = write_random_speech_checkpoint(ckpt, "cpu", DTYPE, seed=5, config=demo_config(), template_dir=demo_ckpt,
                                            shard_bytes=4 << 20, workers=2)
    assert nbytes == checkpoint_bytes(demo_config(), DTYPE)
    return ckpt, read_tensors(ckpt)


def test_names_and_shapes_are_the_released_layout(written: tuple[Path, dict[str, torch.Tensor]],
                                                  demo_ckpt: Path) -> None:
    """The demo checkpoint is written by transformers' save_pretrained: its talker/code2wav names are the authority."""
    ckpt, tensors = written
    with safe_open(str(demo_ckpt / "model.safetensors"), framework="pt") as f:
        want = {n: tuple(f.get_slice(n).get_shape()) for n in f.keys() if n.startswith(("talker.", "code2wav."))}
    got = {n: tuple(t.shape) for n, t in tensors.items() if n.startswith(("talker.", "code2wav."))}
    assert got == want
    assert not any(n.startswith(("thinker.visual.", "thinker.audio_tower.")) for n in tensors)  # text->speech only
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(tensors) and len(set(index["weight_map"].values())) > 3
    assert json.loads((ckpt / "config.json").read_text()) == demo_config()
    assert (ckpt / "tokenizer.json").exists() and (ckpt / "chat_template.json").exists()


def test_talker_loader_puts_each_tensor_where_it_was_written(written: tuple[Path, dict[str, torch.Tensor]]) -> None:
    ckpt, t = written
    model = load_talker_model(ckpt, "cpu", DTYPE)
    inter = model.cfg.lm.moe_intermediate_size
    fused = model.lm.layers[1].mlp.experts
    assert torch.equal(fused.gate_up_proj[3, :inter], t["talker.model.layers.1.mlp.experts.3.gate_proj.weight"])
    assert torch.equal(fused.gate_up_proj[3, inter:], t["talker.model.layers.1.mlp.experts.3.up_proj.weight"])
    assert torch.equal(fused.down_proj[2], t["talker.model.layers.1.mlp.experts.2.down_proj.weight"])
    lm = model.lm.state_dict()
    assert torch.equal(lm["codec_head.weight"], t["talker.codec_head.weight"])
    assert torch.equal(lm["codec_embedding.weight"], t["talker.model.codec_embedding.weight"])
    assert torch.equal(lm["text_projection.linear_fc1.bias"], t["talker.text_projection.linear_fc1.bias"])
    assert torch.equal(lm["layers.0.mlp.shared_expert_gate.weight"],
                       t["talker.model.layers.0.mlp.shared_expert_gate.weight"])
    predictor = model.predictor.state_dict()
    assert torch.equal(predictor["lm_head.2.weight"], t["talker.code_predictor.lm_head.2.weight"])
    assert torch.equal(predictor["codec_embedding.1.weight"], t["talker.code_predictor.model.codec_embedding.1.weight"])
    code2wav = model.code2wav.state_dict()
    assert torch.equal(code2wav["upsample.0.1.pwconv1.weight"], t["code2wav.upsample.0.1.pwconv1.weight"])
    conv = "decoder.1.block.2.conv1.conv.weight"
    assert torch.equal(code2wav[conv], t["code2wav." + conv])
    assert torch.equal(model.embed_table, t["thinker.model.embed_tokens.weight"])


def test_thinker_loader_reads_the_same_embeddings(written: tuple[Path, dict[str, torch.Tensor]]) -> None:
    ckpt, t = written
    thinker = ThinkerLM.load(ckpt, "cpu", DTYPE).state_dict()
    assert torch.equal(thinker["embed_tokens.weight"], t["thinker.model.embed_tokens.weight"])
    assert torch.equal(thinker["lm_head.weight"], t["thinker.lm_head.weight"])
    assert torch.equal(thinker["layers.3.mlp.gate_up_proj"], t["thinker.model.layers.3.mlp.experts.gate_up_proj"])


def test_values_are_the_drawn_distribution(written: tuple[Path, dict[str, torch.Tensor]]) -> None:
    _, t = written
    assert t["talker.model.layers.0.input_layernorm.weight"].eq(1).all()
    assert t["code2wav.pre_transformer.norm.weight"].eq(1).all()
    big = t["thinker.model.embed_tokens.weight"].float()
    assert abs(big.std().item() - 0.02) < 0.001 and abs(big.mean().item()) < 0.001
    # each tensor its own draw: a reused generator state would make the "lands where written" checks vacuous
    gate, up = (t[f"talker.model.layers.1.mlp.experts.3.{p}_proj.weight"] for p in ("gate", "up"))
    assert not torch.equal(gate, up)


def test_same_seed_same_bytes_whatever_the_thread_count(written: tuple[Path, dict[str, torch.Tensor]],
                                                         tmp_path: Path, demo_ckpt: Path) -> None:
    _, first = written
    again = tmp_path / "again"
    write_random_speech_checkpoint(again, "cpu", DTYPE, seed=5, config=demo_config(), template_dir=demo_ckpt,
                                   shard_bytes=4 << 20, workers=1)
    second = read_tensors(again)
    assert second.keys() == first.keys() and all(torch.equal(second[n], first[n]) for n in first)


def test_real_dims_config_carries_the_talker_and_code2wav_dims() -> None:
    cfg = real_speech_config()
    assert cfg["thinker_config"]["text_config"]["num_hidden_layers"] == 48
    assert cfg["talker_config"]["text_config"]["num_experts"] == 128
    assert cfg["code2wav_config"]["decoder_dim"] == 1536
    # ~30.5B thinker + ~3.5B talker/code2wav parameters: ~68 GB in bf16
    assert 66e9 < checkpoint_bytes(cfg, DTYPE) < 70e9


def test_mismatched_thinker_width_is_refused() -> None:
    cfg = demo_config()
    cfg["talker_config"]["thinker_hidden_size"] = 128
    with pytest.raises(ValueError, match="thinker_hidden_size=128"):
        speech_checkpoint_specs(cfg)


def test_tiny_random_weight_mesh_run(tmp_path: Path) -> None:
    """`--random-weights` end to end at the demo dims: written, served by the real mesh processes, removed."""
    out = tmp_path / "speech.json"
    result = bench_main(["--tiny", "--random-weights", "--ckpt-dir", str(tmp_path / "ckpts"), "--talker-device", "cpu",
                         "--thinker-kv-gib", "0.0625", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert result["model"] == "random (std 0.02)" and result["checkpoint"]["dims"] == "demo"
    assert result["checkpoint"]["bytes"] == checkpoint_bytes(demo_config(), torch.float32)
    assert list((tmp_path / "ckpts").iterdir()) == []  # removed after the run
    assert result["device_names"]["talker"] and result["flags"]["random_weights"] is True
    assert [lv["concurrency"] for lv in result["levels"]] == [1, 2]
    assert all(lv["audio_s_per_s"] > 0 for lv in result["levels"])
    validate_routing_record(result["routing"])  # balanced by default: the talker's routers calibrated before serving
    assert result["routing"]["mode"] == "balanced" and result["routing_calibration"]["tokens_per_router_pass"] > 0
    assert sorted(result["routing"]["experts_touched"]) == ["1", "2"]
    assert result["thinker_routing_calibration"]["pass2_decoded_sequences"] == 4


def test_calibrated_routers_are_written_over_the_drawn_ones(tmp_path: Path, demo_ckpt: Path) -> None:
    """What the stages load after calibration is the calibrated routers (and the thinker's LM head), and nothing
    else in the checkpoint changed; a tensor of another shape is refused."""
    from bench.talker.balanced_checkpoint import checkpoint_routing, thinker_checkpoint_routing
    from bench.talker.random_checkpoint import talker_router_name
    from bench.thinker.random_model import overwrite_safetensors
    from runtime.weights import load_component

    ckpt = tmp_path / "ckpt"
    write_random_speech_checkpoint(ckpt, "cpu", DTYPE, seed=5, config=demo_config(), template_dir=demo_ckpt)
    before = {k: t.clone() for k, t in load_component(ckpt, "talker.", "cpu", DTYPE).items()}  # off the mmap
    done = checkpoint_routing(ckpt, "balanced", "cpu", DTYPE, [2], 2)
    after = load_component(ckpt, "talker.", "cpu", DTYPE)
    routers = {talker_router_name(i).removeprefix("talker.") for i in range(demo_config()["talker_config"]
                                                                           ["text_config"]["num_hidden_layers"])}
    assert done["calibration"] is not None and routers <= set(after)
    assert all(not torch.equal(before[n], after[n]) for n in routers)
    assert all(torch.equal(before[n], after[n]) for n in set(before) - routers)
    thinker_before = {k: t.clone() for k, t in load_component(ckpt, "thinker.", "cpu", DTYPE).items()}
    thinker_checkpoint_routing(ckpt, "cpu", DTYPE, prompts=8, decoded=2, decoded_tokens=4)
    thinker_after = load_component(ckpt, "thinker.", "cpu", DTYPE)
    changed = {n for n in thinker_before if not torch.equal(thinker_before[n], thinker_after[n])}
    assert changed == {"lm_head.weight"} | {n for n in thinker_before if n.endswith(".mlp.gate.weight")}, changed
    shard = next(ckpt.glob("*.safetensors"))
    with safe_open(str(shard), framework="pt") as f:
        name = next(iter(f.keys()))
        shape = f.get_tensor(name).shape
    with pytest.raises(ValueError, match=name):
        overwrite_safetensors(shard, {name: torch.zeros(*shape, 1)})


def test_stage_devices_and_frame_cap_follow_the_flags() -> None:
    args = parse_args(["--random-weights", "--device", "cuda:0", "--talker-device", "cuda:1", "--thinker-kv-gib", "8",
                       "--out", "x.json"])
    thinker, stages = mesh_stages(args, {})
    assert thinker == {"device": "cuda:0", "dtype": "float32", "engine": {"kv_cache_bytes": 8 << 30}}
    assert "decodes_in_flight" not in stages["talker"]["speech"]  # the config's default
    variant = mesh_stages(args, {"decodes_in_flight": 4, "frames_ahead": False})[1]["talker"]["speech"]
    assert variant["decodes_in_flight"] == 4 and variant["frames_ahead"] is False
    assert stages["talker"]["device"] == "cuda:1"
    assert stages["talker"]["speech"]["max_frames"] == RANDOM_WEIGHTS_MAX_FRAMES  # random weights never stop by EOS
    args = parse_args(["--device", "cuda", "--out", "x.json"])
    thinker, stages = mesh_stages(args, {})
    assert "engine" not in thinker and stages["talker"]["device"] == "cuda"
    assert stages["talker"]["speech"]["max_frames"] == 4095


@pytest.mark.parametrize("text, message", [
    ("decodes_in_flight", "use KEY=VALUE"),
    ("decode_in_flight=2", "unknown config key talker.speech.decode_in_flight (did you mean decodes_in_flight?)"),
    ("decodes_in_flight=0", "talker.speech.decodes_in_flight=0 is invalid"),
])
def test_a_bad_speech_variant_names_the_key_and_what_is_allowed(text: str, message: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--out", "x.json", "--speech", text])
    assert message in capsys.readouterr().err


def test_speech_variants_read_yaml_values() -> None:
    args = parse_args(["--out", "x.json", "--speech", "prioritize_frames=true,decodes_in_flight=4", "frames_ahead=off"])
    assert args.speech == [{"prioritize_frames": True, "decodes_in_flight": 4}, {"frames_ahead": False}]
    assert parse_args(["--out", "x.json"]).speech == [{}]  # one mesh on the config's defaults


def test_no_room_for_the_checkpoint_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda _: SimpleNamespace(total=1 << 30, used=1 << 30, free=0))
    args = parse_args(["--random-weights", "--ckpt-dir", str(tmp_path), "--out", "x.json"])
    with pytest.raises(OSError, match="pass --ckpt-dir"):
        write_random_checkpoint(args)
    assert list(tmp_path.iterdir()) == []

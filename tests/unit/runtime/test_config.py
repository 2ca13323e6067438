"""Mesh config: every section's checks, from_dict errors by dotted key, YAML with overrides, write/read. The strict
checks of every section (types, unknown keys, bounds) are in test_config_strict.py."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from runtime.config import (
    STAGES,
    EncoderConfig,
    EngineConfig,
    GatewayConfig,
    MeshConfig,
    SamplingDefaults,
    ServerConfig,
    AudioStageConfig,
    StageConfig,
    ThinkerStageConfig,
    VISION_LINEAR_DTYPES,
    VisionStageConfig,
    from_dict,
    load_mesh_config,
    to_dict,
    write_mesh_config,
)


@pytest.mark.parametrize(("cls", "kwargs", "field"), [
    (ServerConfig, {"port": -1}, "port"),
    (ServerConfig, {"port": 65536}, "port"),
    (ServerConfig, {"metrics_port": -2}, "metrics_port"),
    (ServerConfig, {"metrics_port": 70000}, "metrics_port"),
    (ServerConfig, {"max_message_bytes": (2 << 20) - 1}, "max_message_bytes"),
    (ServerConfig, {"keepalive_time_ms": 9_999}, "keepalive_time_ms"),
    (ServerConfig, {"drain_grace_s": -0.1}, "drain_grace_s"),
    (EngineConfig, {"max_num_seqs": 0}, "max_num_seqs"),
    (EngineConfig, {"max_num_seqs": 8, "max_batch_tokens": 7}, "max_batch_tokens"),
    (EngineConfig, {"block_size": 24}, "block_size"),
    (EngineConfig, {"num_kv_blocks": -1}, "num_kv_blocks"),
    (EngineConfig, {"kv_cache_bytes": 0}, "kv_cache_bytes"),
    (EngineConfig, {"max_model_len": -1}, "max_model_len"),
    (EngineConfig, {"token_flush_ms": -1.0}, "token_flush_ms"),
    (EncoderConfig, {"max_batch_size": 0}, "max_batch_size"),
    (EncoderConfig, {"max_request_size": 0}, "max_request_size"),
    (EncoderConfig, {"batch_wait_ms": -1.0}, "batch_wait_ms"),
    (StageConfig, {"dtype": "float64"}, "dtype"),
    (StageConfig, {"device": "tpu"}, "device"),
    (VisionStageConfig, {"linear_dtype": "int8"}, "linear_dtype"),
    (VisionStageConfig, {"linear_dtype": "fp8"}, "linear_dtype"),  # on the default cpu, float32
    (StageConfig, {"cpu_threads": -1}, "cpu_threads"),
    (SamplingDefaults, {"temperature": -0.5}, "temperature"),
    (SamplingDefaults, {"top_p": 0.0}, "top_p"),
    (SamplingDefaults, {"top_p": 1.5}, "top_p"),
    (SamplingDefaults, {"max_tokens": 0}, "max_tokens"),
    (GatewayConfig, {"stage_timeout_s": 0}, "stage_timeout_s"),
    (GatewayConfig, {"max_audio_seconds": 0.0}, "max_audio_seconds"),
    (GatewayConfig, {"max_video_frames": 1}, "max_video_frames"),
])
def test_every_check_names_the_field_and_the_value(cls: type, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError) as info:
        cls(**kwargs)
    msg = str(info.value)
    assert f"{field}={kwargs[field]!r}" in msg and "invalid" in msg


@pytest.mark.parametrize(("cls", "kwargs"), [
    (ServerConfig, {"port": 0, "metrics_port": -1, "max_message_bytes": 2 << 20, "keepalive_time_ms": 10_000,
                    "drain_grace_s": 0}),
    (ServerConfig, {"port": 65535, "metrics_port": 65535}),
    (EngineConfig, {"max_num_seqs": 1, "max_batch_tokens": 1, "block_size": 128, "num_kv_blocks": 0,
                    "max_model_len": 0, "token_flush_ms": 0}),
    (EncoderConfig, {"max_batch_size": 1, "max_request_size": 1, "batch_wait_ms": 0.0}),
    (GatewayConfig, {"max_video_frames": 2, "max_audio_seconds": 0.1}),
    (StageConfig, {"device": "cuda:3", "dtype": "bfloat16"}),
    (StageConfig, {"device": "cuda", "dtype": "float16"}),
    (VisionStageConfig, {"device": "cuda:1", "dtype": "bfloat16", "linear_dtype": "fp8"}),
    (SamplingDefaults, {"temperature": 0.0, "top_p": 1.0, "max_tokens": 1}),
])
def test_edge_values_are_accepted(cls: type, kwargs: dict[str, Any]) -> None:
    cls(**kwargs)


@pytest.mark.parametrize("size", [8, 16, 32, 64, 128])
def test_every_block_size_is_accepted(size: int) -> None:
    assert EngineConfig(block_size=size).block_size == size


def test_configs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        EngineConfig().max_num_seqs = 3  # type: ignore[misc]


def test_defaults() -> None:
    cfg = MeshConfig()
    assert cfg.model == "demo" and cfg.thinker.enabled
    assert cfg.vision.enabled and cfg.audio.enabled and cfg.talker.enabled  # `make serve` serves every stage
    assert cfg.gateway.server.port == 50051 and cfg.gateway.api_keys == ()
    assert cfg.stage("thinker") is cfg.thinker
    assert [cfg.stage(s) for s in STAGES] == [cfg.thinker, cfg.vision, cfg.audio, cfg.talker]


def test_unknown_stage_name() -> None:
    with pytest.raises(ValueError, match="stage 'gateway' is not one of"):
        MeshConfig().stage("gateway")


# --- from_dict ----------------------------------------------------------------------------------------------------

def test_from_dict_builds_nested_sections() -> None:
    cfg = from_dict(MeshConfig, {
        "model": "/ckpt",
        "thinker": {"device": "cuda:1", "engine": {"max_num_seqs": 4, "max_batch_tokens": 256}},
        "gateway": {"api_keys": ["a", "b"], "server": {"port": 9000}},
        "vision": {"enabled": False},
    })
    assert cfg.model == "/ckpt" and cfg.thinker.device == "cuda:1"
    assert cfg.thinker.engine == EngineConfig(max_num_seqs=4, max_batch_tokens=256)
    assert cfg.gateway.api_keys == ("a", "b") and cfg.gateway.server.port == 9000 and not cfg.vision.enabled
    assert cfg.audio == AudioStageConfig()


def test_from_dict_empty_section_takes_defaults() -> None:
    cfg = from_dict(MeshConfig, {"thinker": None, "gateway": {"api_keys": None}})
    assert cfg == MeshConfig()


def test_unknown_key_is_named_by_its_dotted_path() -> None:
    with pytest.raises(ValueError) as info:
        from_dict(MeshConfig, {"thinker": {"engine": {"max_num_seq": 4}}})
    assert "thinker.engine.max_num_seq" in str(info.value) and "max_num_seqs" in str(info.value)


def test_unknown_top_level_key() -> None:
    with pytest.raises(ValueError, match=r"unknown config key modle \(did you mean model\?\): MeshConfig takes only "
                                         r"model, gateway, thinker, vision, audio, talker"):
        from_dict(MeshConfig, {"modle": "x"})


def test_a_bad_value_is_named_by_its_dotted_key() -> None:
    with pytest.raises(ValueError) as info:
        from_dict(MeshConfig, {"thinker": {"engine": {"max_num_seqs": 0}}})
    assert "config field thinker.engine.max_num_seqs=0 is invalid" in str(info.value)


def test_a_section_that_is_not_a_mapping() -> None:
    with pytest.raises(ValueError, match="config section thinker.engine must be a mapping, got list"):
        from_dict(MeshConfig, {"thinker": {"engine": [1, 2]}})
    with pytest.raises(ValueError, match="config section <root> must be a mapping, got str"):
        from_dict(MeshConfig, "model: x")  # type: ignore[arg-type]


def test_a_value_of_the_wrong_type_is_a_value_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"config field thinker\.engine\.max_num_seqs='four' is invalid: use an "
                                         r"integer >= 1, not a str"):
        from_dict(MeshConfig, {"thinker": {"engine": {"max_num_seqs": "four"}}})


def test_a_string_for_a_list_field_is_refused_not_split_into_characters() -> None:
    with pytest.raises(ValueError, match=r"config field api_keys='secret' is invalid: use a list of strings, not a "
                                         r"str"):
        from_dict(GatewayConfig, {"api_keys": "secret"})


# --- YAML and overrides -------------------------------------------------------------------------------------------

def test_no_file_no_overrides_gives_defaults() -> None:
    assert load_mesh_config() == MeshConfig()


def test_yaml_then_dotted_overrides(tmp_path: Path) -> None:
    path = tmp_path / "mesh.yaml"
    path.write_text(
        "model: /models/omni\n"
        "thinker:\n"
        "  device: cuda:0\n"
        "  dtype: bfloat16\n"
        "  engine:\n"
        "    max_num_seqs: 16\n"
        "gateway:\n"
        "  api_keys: [k1]\n"
    )
    cfg = load_mesh_config(path, {"thinker.engine.max_num_seqs": 4, "talker.enabled": True, "model": "/other"})
    assert cfg.model == "/other"
    assert cfg.thinker.device == "cuda:0" and cfg.thinker.dtype == "bfloat16"
    assert cfg.thinker.engine.max_num_seqs == 4 and cfg.talker.enabled
    assert cfg.gateway.api_keys == ("k1",)


def test_empty_yaml_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_mesh_config(path) == MeshConfig()


def test_an_override_can_break_a_check_and_is_named() -> None:
    with pytest.raises(ValueError, match=r"thinker\.engine\.max_batch_tokens=32 .*max_num_seqs \(64\)"):
        load_mesh_config(None, {"thinker.engine.max_num_seqs": 64, "thinker.engine.max_batch_tokens": 32})


def test_an_unknown_override_key_is_named() -> None:
    with pytest.raises(ValueError, match="thinker.engin"):
        load_mesh_config(None, {"thinker.engin.max_num_seqs": 2})


def test_an_override_under_an_empty_yaml_section(tmp_path: Path) -> None:
    path = tmp_path / "mesh.yaml"
    path.write_text("thinker:\n")
    assert load_mesh_config(path, {"thinker.device": "cuda"}).thinker.device == "cuda"


def test_yaml_with_an_unknown_key_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("vision:\n  server:\n    prot: 5\n")
    with pytest.raises(ValueError, match="vision.server.prot"):
        load_mesh_config(path)


def test_a_file_that_is_not_yaml_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "mesh.yaml"
    bad.write_text("thinker: [\n")
    with pytest.raises(ValueError, match=r"mesh.yaml is not valid YAML"):
        load_mesh_config(bad)
    bad.write_text("- thinker\n")
    with pytest.raises(ValueError, match=r"mesh.yaml must hold a mapping of sections .* not list"):
        load_mesh_config(bad)


def test_encoder_pending_work_must_hold_a_whole_request() -> None:
    with pytest.raises(ValueError, match=r"max_pending_size=100 is invalid: use a value >= max_request_size \(200\)"):
        EncoderConfig(max_request_size=200, max_pending_size=100)


def test_write_then_load_round_trips(tmp_path: Path) -> None:
    cfg = MeshConfig(
        model="/m",
        gateway=GatewayConfig(api_keys=("a", "b"), sampling=SamplingDefaults(temperature=0.0)),
        thinker=ThinkerStageConfig(device="cuda:1", engine=EngineConfig(max_num_seqs=2, max_batch_tokens=64)),
        vision=VisionStageConfig(enabled=True, address="dns:///vision:1"),
    )
    path = tmp_path / "out.yaml"
    write_mesh_config(cfg, path)
    assert load_mesh_config(path) == cfg
    assert to_dict(cfg)["gateway"]["api_keys"] == ["a", "b"]  # lists: plain YAML, no python tags
    assert "!!python" not in path.read_text()


def test_linear_dtype_defaults_to_native_and_names_the_allowed_values() -> None:
    assert MeshConfig().vision.linear_dtype == "native" and VISION_LINEAR_DTYPES == ("native", "fp8")
    with pytest.raises(ValueError, match=r"config field vision\.linear_dtype='e4m3' is invalid: use one of "
                                         r"'native', 'fp8'"):
        load_mesh_config(None, {"vision.linear_dtype": "e4m3"})


@pytest.mark.parametrize(("device", "dtype"), [("cpu", "bfloat16"), ("cuda", "float16"), ("cuda:0", "float32")])
def test_fp8_linears_need_cuda_and_bfloat16(device: str, dtype: str) -> None:
    with pytest.raises(ValueError, match=rf"vision\.linear_dtype='fp8' is invalid: FP8 linears need device cuda\[:N\] "
                                         rf".* and dtype bfloat16, but this stage has device '{device}' and dtype "
                                         rf"'{dtype}'"):
        load_mesh_config(None, {"vision.linear_dtype": "fp8", "vision.device": device, "vision.dtype": dtype})


def test_fp8_vision_linears_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "mesh.yaml"
    path.write_text("vision:\n  device: cuda\n  dtype: bfloat16\n  linear_dtype: fp8\n")
    assert load_mesh_config(path).vision.linear_dtype == "fp8"


@pytest.mark.parametrize("stage", [s for s in STAGES if s != "vision"])
def test_only_the_vision_stage_takes_fp8_linears(stage: str) -> None:
    overrides = {f"{stage}.linear_dtype": "fp8", f"{stage}.device": "cuda", f"{stage}.dtype": "bfloat16"}
    with pytest.raises(ValueError, match=rf"unknown config key {stage}\.linear_dtype: {stage} takes only "):
        load_mesh_config(None, overrides)


def test_video_fps_must_give_whole_rope_times() -> None:
    from runtime.config import GatewayConfig

    assert GatewayConfig(video_fps=1.0).video_fps == 1.0
    with pytest.raises(ValueError, match="video_fps"):
        GatewayConfig(video_fps=3.0)  # 2 / 3 * 13 is fractional
    with pytest.raises(ValueError, match="video_fps"):
        GatewayConfig(video_fps=0.0)

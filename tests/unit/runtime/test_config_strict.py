"""Every config section is strict: a value of the wrong type, an unknown key and a value out of range each fail the
load with one line naming the dotted key, the value given and what is allowed. The cases are generated from the
sections themselves, so a field or section added later is covered without a new test."""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from typing import Any, Literal

import annotated_types
import pytest

from runtime.config import MeshConfig, ServerConfig, SpeechConfig, load_mesh_config
from runtime.config_section import ConfigError, allowed_values

WRONG_TYPE = {bool: "no", int: "4", float: "1.5", str: 5}  # what YAML or a flag would hand over, never converted


def sections(cls: type = MeshConfig, path: str = "") -> Iterator[tuple[str, type]]:
    """(dotted path, class) of `cls` and every section nested in it; the top level's path is ''."""
    yield path, cls
    for name, field in cls.__pydantic_fields__.items():  # type: ignore[attr-defined]
        if dataclasses.is_dataclass(field.annotation):
            yield from sections(field.annotation, f"{path}{name}.")


def leaves() -> Iterator[tuple[str, Any]]:
    """(dotted key, FieldInfo) of every field that holds a value rather than a section."""
    for path, cls in sections():
        for name, field in cls.__pydantic_fields__.items():  # type: ignore[attr-defined]
            if not dataclasses.is_dataclass(field.annotation):
                yield path + name, field


def wrong_type(field: Any) -> Any:
    annotation = field.annotation
    if typing.get_origin(annotation) is Literal:
        return 5
    if typing.get_origin(annotation) is tuple:
        return "8"  # a string is not a list, nor split into characters
    return WRONG_TYPE[annotation]


def out_of_range(field: Any) -> Iterator[Any]:
    """A value just past each bound the field declares."""
    step = 1 if field.annotation is int else 0.5
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Ge):
            yield bound.ge - step
        elif isinstance(bound, annotated_types.Gt):
            yield bound.gt
        elif isinstance(bound, annotated_types.Le):
            yield bound.le + step


def load_error(overrides: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        load_mesh_config(None, overrides)
    message = str(info.value)
    assert "\n" not in message  # `omnimesh up` prints it as one line
    return message


SECTION_PATHS = [path.removesuffix(".") for path, _ in sections()]
TYPE_CASES = [(key, wrong_type(field), field) for key, field in leaves()]
RANGE_CASES = [(key, value, field) for key, field in leaves() for value in out_of_range(field)]


def test_every_section_is_covered() -> None:
    assert SECTION_PATHS == ["", "gateway", "gateway.server", "gateway.sampling", "gateway.stage_tls", "thinker",
                             "thinker.server",
                             "thinker.engine", "vision", "vision.server", "vision.encoder", "audio", "audio.server",
                             "audio.encoder", "talker", "talker.server", "talker.speech"]
    ranged = {key.rpartition(".")[0] for key, _, _ in RANGE_CASES}
    # the top level holds only `model`, a path; stage_tls only file paths
    assert ranged == set(SECTION_PATHS) - {"", "gateway.stage_tls"}


@pytest.mark.parametrize(("key", "value", "field"), TYPE_CASES, ids=[case[0] for case in TYPE_CASES])
def test_a_value_of_the_wrong_type_is_named_with_what_is_allowed(key: str, value: Any, field: Any) -> None:
    message = load_error({key: value})
    assert message.startswith(f"config field {key}={value!r} is invalid: use {allowed_values(field)}")


@pytest.mark.parametrize(("key", "value", "field"), RANGE_CASES, ids=[f"{k}={v}" for k, v, _ in RANGE_CASES])
def test_a_value_out_of_range_is_named_with_what_is_allowed(key: str, value: Any, field: Any) -> None:
    assert load_error({key: value}) == f"config field {key}={value!r} is invalid: use {allowed_values(field)}"


@pytest.mark.parametrize("section", SECTION_PATHS[1:])
def test_an_unknown_key_is_named_with_the_keys_its_section_takes(section: str) -> None:
    message = load_error({f"{section}.no_such_key": 1})
    assert message.startswith(f"unknown config key {section}.no_such_key: {section} takes only ")


@pytest.mark.parametrize("section", SECTION_PATHS[1:])
def test_a_section_that_is_not_a_mapping_is_named(section: str) -> None:
    assert load_error({section: [1]}) == f"config section {section} must be a mapping, got list"


# Sections that loaded before each stage had its own type, and were then ignored.
@pytest.mark.parametrize("key", ["vision.engine", "audio.engine", "talker.engine", "thinker.encoder", "talker.encoder",
                                 "thinker.speech", "vision.speech", "thinker.linear_dtype", "audio.linear_dtype",
                                 "talker.linear_dtype", "gateway.engine", "gateway.device"])
def test_a_setting_in_a_stage_that_has_no_use_for_it_is_refused(key: str) -> None:
    section = key.partition(".")[0]
    assert load_error({key: {}}).startswith(f"unknown config key {key}: {section} takes only ")


@pytest.mark.parametrize(("overrides", "message"), [
    ({"thinker.engine.enable_prefix_cache": "no"},
     "config field thinker.engine.enable_prefix_cache='no' is invalid: use true or false, not a str"),
    ({"vision.encoder.max_batch_size": "4"},
     "config field vision.encoder.max_batch_size='4' is invalid: use an integer >= 1, not a str"),
    ({"audio.encoder.max_batch_size": 4.0},
     "config field audio.encoder.max_batch_size=4.0 is invalid: use an integer >= 1, not a float"),
    ({"talker.speech.max_rows": True},
     "config field talker.speech.max_rows=True is invalid: use an integer >= 1, not a bool"),
    ({"thinker.stall_timeout_s": None},
     "config field thinker.stall_timeout_s=None is invalid: use a number >= 0 (0: never judge a step stalled), "
     "not empty"),
    ({"talker.speech.top_p": 0},
     "config field talker.speech.top_p=0 is invalid: use a number in (0, 1] (1 disables)"),
    ({"gateway.server.port": 70000},
     "config field gateway.server.port=70000 is invalid: use an integer in [0, 65535] (0 picks a free port)"),
    ({"thinker.dtype": "float64"},
     "config field thinker.dtype='float64' is invalid: use one of 'float32', 'bfloat16', 'float16'"),
    ({"thinker.engine.decode_batch_buckets": [1, "2"]},
     "config field thinker.engine.decode_batch_buckets[1]='2' is invalid: use a list of integers, not a str"),
    ({"thinker.engine.max_num_seq": 4},
     "unknown config key thinker.engine.max_num_seq (did you mean max_num_seqs?): thinker.engine takes only "
     "max_num_seqs, max_waiting_seqs, max_batch_tokens, block_size, num_kv_blocks, kv_cache_bytes, max_model_len, "
     "token_flush_ms, enable_prefix_cache, late_launch, num_state_slots, num_state_snapshots, cuda_graphs, "
     "decode_batch_buckets, prefill_token_buckets"),
])
def test_the_wording_of_each_kind_of_error(overrides: dict[str, Any], message: str) -> None:
    assert load_error(overrides) == message


@pytest.mark.parametrize(("key", "value", "fix"), [
    ("thinker.engine.block_size", 24, "use 8, 16, 32, 64 or 128"),
    ("vision.device", "tpu", "use cpu, cuda or cuda:N"),
    ("talker.device", "cuda:x", "use cpu, cuda or cuda:N"),
    ("gateway.video_fps", 3.0, "use a rate where 2 / fps * 13 is whole"),
    ("audio.encoder.max_pending_size", 100, "use a value >= max_request_size (262144)"),
    ("thinker.engine.prefill_token_buckets", (512, 256), "use positive integers in strictly increasing order"),
])
def test_a_cross_field_check_is_named_by_its_dotted_key(key: str, value: Any, fix: str) -> None:
    assert load_error({key: value}).startswith(f"config field {key}={value!r} is invalid: {fix}")


def test_the_value_is_shown_as_a_short_prefix_only() -> None:
    message = load_error({"gateway.server.host": ["x" * 500]})
    assert "config field gateway.server.host=['xxxx" in message and "..." in message and "x" * 100 not in message


def test_every_error_of_a_file_is_named_on_one_line() -> None:
    message = load_error({"thinker.engine.block_size": "16", "talker.speech.max_rows": 0, "audio.x": 1})
    assert message.count("; ") == 2
    assert "thinker.engine.block_size='16'" in message and "talker.speech.max_rows=0" in message
    assert "unknown config key audio.x" in message


def test_empty_sections_and_lists_take_the_defaults() -> None:
    assert load_mesh_config(None, {"thinker": None, "gateway.api_keys": None}) == MeshConfig()


def test_an_int_is_a_whole_number_for_a_float_field() -> None:
    assert load_mesh_config(None, {"thinker.stall_timeout_s": 60}).thinker.stall_timeout_s == 60.0


def test_code_that_builds_a_section_gets_the_same_checks() -> None:
    with pytest.raises(ConfigError, match=r"^config field top_k=-1 is invalid: use an integer >= 0 \(0 disables"):
        SpeechConfig(top_k=-1)
    with pytest.raises(ConfigError, match=r"^config field port='1' is invalid: use an integer in \[0, 65535\]"):
        dataclasses.replace(ServerConfig(), port="1")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^unknown config key prot \(did you mean port\?\): ServerConfig takes"):
        ServerConfig(prot=1)  # type: ignore[call-arg]

"""Mesh configuration: one YAML for the whole deployment, read into frozen dataclasses; flags override."""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

STAGES = ("thinker", "vision", "audio", "talker")
# The vision tower's block linears (qkv, proj, fc1, fc2): "native" runs them in the stage's dtype, "fp8" in e4m3 with
# per-row scales (FP8 tensor cores: compute capability >= 8.9, e.g. H100/H200; dtype bfloat16).
VISION_LINEAR_DTYPES = ("native", "fp8")


@dataclass(frozen=True)
class ServerConfig:
    """How one process listens: gRPC and Prometheus ports, message limits, keepalive, drain."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port
    metrics_port: int = 0  # 0: pick a free port; -1: no metrics endpoint
    max_message_bytes: int = 16 << 20  # tensors travel in 1 MiB chunks; this only bounds one message
    keepalive_time_ms: int = 30_000  # clients ping at >= 20 s; the server allows it (ops-notes.md)
    max_connection_age_ms: int = 300_000  # makes clients re-resolve DNS so new pods get traffic
    max_connection_age_grace_ms: int = 600_000  # long enough for a long generation to finish
    drain_grace_s: float = 30.0

    def __post_init__(self) -> None:
        _check(0 <= self.port <= 65535, "port", self.port, "use 0 for a free port or a value up to 65535")
        _check(-1 <= self.metrics_port <= 65535, "metrics_port", self.metrics_port, "use -1 to disable, 0 for free")
        _check(self.max_message_bytes >= (2 << 20), "max_message_bytes", self.max_message_bytes,
               "must exceed the 1 MiB tensor chunk; use at least 2097152")
        _check(self.keepalive_time_ms >= 10_000, "keepalive_time_ms", self.keepalive_time_ms,
               "pings more often than every 10 s get connections closed for 'too many pings'")
        _check(self.drain_grace_s >= 0, "drain_grace_s", self.drain_grace_s, "use a value >= 0")


@dataclass(frozen=True)
class EngineConfig:
    """Decoder engine knobs (thinker and talker)."""

    max_num_seqs: int = 32  # rows in one step
    max_waiting_seqs: int = 256  # admitted beyond the running rows; past it new requests get RESOURCE_EXHAUSTED
    max_batch_tokens: int = 2048  # tokens in one step (prefill chunks + decode rows)
    block_size: int = 16  # tokens per KV block
    num_kv_blocks: int = 0  # 0: size from kv_cache_bytes
    kv_cache_bytes: int = 256 << 20
    max_model_len: int = 0  # 0: the checkpoint's max_position_embeddings
    token_flush_ms: float = 15.0  # coalesce token deltas on a stream (ops-notes.md: ~40 us per message)
    enable_prefix_cache: bool = True  # reuse the KV of full blocks whose tokens and media match an earlier prompt
    # CUDA graphs (GPU kernel path only): a step whose shape fits a bucket replays a graph captured at start.
    cuda_graphs: bool = True
    decode_batch_buckets: tuple[int, ...] = ()  # rows of decode-only steps; () = 1, 2, 4, ... and max_num_seqs
    prefill_token_buckets: tuple[int, ...] = ()  # tokens of prefill/mixed steps, each <= max_batch_tokens; () = none

    def __post_init__(self) -> None:
        _check(self.max_num_seqs >= 1, "max_num_seqs", self.max_num_seqs, "use a value >= 1")
        _check(self.max_waiting_seqs >= 0, "max_waiting_seqs", self.max_waiting_seqs,
               "use a value >= 0 (0: no queue beyond the running rows)")
        _check(self.max_batch_tokens >= self.max_num_seqs, "max_batch_tokens", self.max_batch_tokens,
               f"must be >= max_num_seqs ({self.max_num_seqs}) so every running row can decode in one step")
        _check(self.block_size in (8, 16, 32, 64, 128), "block_size", self.block_size, "use 8, 16, 32, 64 or 128")
        _check(self.num_kv_blocks >= 0, "num_kv_blocks", self.num_kv_blocks, "use 0 (auto) or a positive count")
        _check(self.kv_cache_bytes > 0, "kv_cache_bytes", self.kv_cache_bytes, "use a positive byte count")
        _check(self.max_model_len >= 0, "max_model_len", self.max_model_len, "use 0 (checkpoint) or a positive length")
        _check(self.token_flush_ms >= 0, "token_flush_ms", self.token_flush_ms, "use a value >= 0")
        for name in ("decode_batch_buckets", "prefill_token_buckets"):
            ladder = getattr(self, name)
            _check(all(isinstance(v, int) and v >= 1 for v in ladder) and list(ladder) == sorted(set(ladder)),
                   name, ladder, "use positive integers in strictly increasing order")
        for rows in self.decode_batch_buckets:
            _check(rows <= self.max_num_seqs, "decode_batch_buckets", self.decode_batch_buckets,
                   f"bucket {rows} exceeds max_num_seqs ({self.max_num_seqs}): a step never holds more rows, so "
                   "its graph could never be replayed; drop it or raise max_num_seqs")
        for tokens in self.prefill_token_buckets:
            _check(tokens <= self.max_batch_tokens, "prefill_token_buckets", self.prefill_token_buckets,
                   f"rung {tokens} exceeds max_batch_tokens ({self.max_batch_tokens}): the step budget never "
                   "reaches it, so its graph could never be replayed; drop it or raise max_batch_tokens")

    @property
    def graph_decode_buckets(self) -> tuple[int, ...]:
        """The decode buckets to capture: the configured ones, else powers of two up to max_num_seqs and it."""
        if self.decode_batch_buckets:
            return self.decode_batch_buckets
        powers = [1 << i for i in range(self.max_num_seqs.bit_length()) if 1 << i < self.max_num_seqs]
        return (*powers, self.max_num_seqs)


@dataclass(frozen=True)
class EncoderConfig:
    """Encoder stage knobs (vision, audio): items of concurrent requests batch into one forward.

    Sizes count the stage's unit of work: patches for vision (4 patches make one thinker token), log-mel frames
    for audio (100 per second of sound: the defaults are ~655 s per forward and ~2,621 s per request).
    """

    max_batch_size: int = 65536  # per forward; a 60 s, 2 fps, 448x448 video (47,040 patches) runs whole
    max_request_size: int = 262144  # per Encode call: 65,536 vision tokens, the released thinker's context
    batch_wait_ms: float = 5.0  # how long a forward waits for more items once its first item is queued
    # work accepted and not finished (read, queued, computing) past which new requests get RESOURCE_EXHAUSTED: two
    # whole requests; vision's ~616 MB of frames (60 s, 2 fps, 448x448 videos: ~11), audio's ~87 min of samples
    max_pending_size: int = 524288

    def __post_init__(self) -> None:
        _check(self.max_batch_size >= 1, "max_batch_size", self.max_batch_size, "use a value >= 1")
        _check(self.max_request_size >= 1, "max_request_size", self.max_request_size, "use a value >= 1")
        _check(self.max_pending_size >= self.max_request_size, "max_pending_size", self.max_pending_size,
               f"use a value >= max_request_size ({self.max_request_size}), or the largest request never shares")
        _check(self.batch_wait_ms >= 0, "batch_wait_ms", self.batch_wait_ms, "use a value >= 0 (0: no waiting)")


@dataclass(frozen=True)
class SpeechConfig:
    """Talker stage knobs: concurrent rows, frame limits, audio chunk sizes and the default sampling (the model's).

    Sizes count codec frames: 12.5 per second of 24 kHz audio (1,920 samples each). Requests override the
    sampling fields per call; unset fields take these.
    """

    max_rows: int = 32  # requests speaking at once; each holds one talker KV slot from its first token to its end
    max_waiting: int = 256  # requests queued for a row; past it new ones get RESOURCE_EXHAUSTED
    max_frames: int = 4095  # codec frames per answer (~5.5 min); the reference's 4,096 talker tokens less the EOS
    max_prompt_tokens: int = 8192  # user-turn tokens of one talker prompt; a KV slot holds these + 10 + max_frames
    # rows starting together share one prefill, right-padded to the longest: at most this many padded tokens (a
    # longer prompt still starts, alone)
    max_prefill_tokens: int = 4096
    first_chunk_frames: int = 4  # frames in the first audio chunk: 320 ms of sound, a low time to first audio
    chunk_frames: int = 25  # frames in each later chunk (2 s): fewer, larger Code2Wav calls
    left_context_frames: int = 11  # frames the conv stack re-runs before a chunk; 11 covers its receptive field: exact
    cuda_graphs: bool = True  # on CUDA in bf16/fp16: fused frame step, captured per batch bucket at start
    # launch each frame before reading the last one's codes, so the engine's host work overlaps the GPU (fused frame
    # step only): +1 / +2 / +6% audio-s/s at c=1 / 8 / 32 on two H200s (bench/talker/NOTES.md)
    frames_ahead: bool = True
    # Code2Wav decodes in flight at most: the engine collects each one once it is done instead of waiting for it on
    # the next iteration, so a long decode (32 streams: ~40 ms) leaves the frames running
    decodes_in_flight: int = 4
    # the engine's frames on a high-priority CUDA stream, Code2Wav on a default-priority one, so decodes in flight
    # fill the SMs the frames leave idle instead of slowing them. Two H200s, c=32: 4 in flight alone 207 audio-s/s,
    # with this 232-238, neither 212-223 (bench/talker/NOTES.md)
    prioritize_frames: bool = True
    temperature: float = 0.9  # talker (codebook 0); 0 is greedy
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05  # on the codebook-0 codes the request generated
    predictor_temperature: float = 1.0  # code predictor (codebooks 1..15); greedy whenever the talker is
    predictor_top_k: int = 50
    predictor_top_p: float = 0.8

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_frames", "max_prompt_tokens", "max_prefill_tokens", "first_chunk_frames",
                     "chunk_frames", "left_context_frames", "decodes_in_flight"):
            _check(getattr(self, name) >= 1, name, getattr(self, name), "use a value >= 1")
        _check(self.max_waiting >= 0, "max_waiting", self.max_waiting, "use a value >= 0 (0: no queue)")
        _check(self.temperature >= 0, "temperature", self.temperature, "use a value >= 0 (0 is greedy)")
        _check(self.predictor_temperature >= 0, "predictor_temperature", self.predictor_temperature,
               "use a value >= 0 (0 is greedy)")
        for name in ("top_k", "predictor_top_k"):
            _check(getattr(self, name) >= 0, name, getattr(self, name), "use a value >= 0 (0 disables top-k)")
        for name in ("top_p", "predictor_top_p"):
            _check(0 < getattr(self, name) <= 1, name, getattr(self, name), "use a value in (0, 1] (1 disables)")
        _check(self.repetition_penalty > 0, "repetition_penalty", self.repetition_penalty,
               "use a value > 0 (1 disables)")


@dataclass(frozen=True)
class StageConfig:
    """One stage: where it runs and how the gateway reaches it."""

    enabled: bool = True
    device: str = "cpu"  # "cpu", "cuda" or "cuda:N"
    dtype: str = "float32"  # float32 | bfloat16 | float16
    linear_dtype: str = "native"  # vision only: one of VISION_LINEAR_DTYPES
    # torch's CPU threads in this process; 0: one on a CUDA device, the machine's default on CPU (see stage_device)
    cpu_threads: int = 0
    address: str = ""  # target the gateway dials, e.g. "dns:///thinker.omnimesh.svc:50051"; `omnimesh up` fills it
    # an engine step or encoder forward running longer than this (a hung device) turns the stage NOT_SERVING so it is
    # restarted; 0: never. Far above any real step (the released thinker's longest prefill step takes about a second)
    stall_timeout_s: float = 120.0
    server: ServerConfig = field(default_factory=ServerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)  # decoder stages (thinker, talker)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)  # encoder stages (vision, audio)
    speech: SpeechConfig = field(default_factory=SpeechConfig)  # the talker stage

    def __post_init__(self) -> None:
        _check(self.dtype in ("float32", "bfloat16", "float16"), "dtype", self.dtype,
               "use float32, bfloat16 or float16")
        _check(self.device == "cpu" or self.device.startswith("cuda"), "device", self.device, "use cpu or cuda[:N]")
        _check(self.stall_timeout_s >= 0, "stall_timeout_s", self.stall_timeout_s,
               "use a number of seconds >= 0 (0: never judge a step stalled)")
        _check(self.cpu_threads >= 0, "cpu_threads", self.cpu_threads,
               "use a count >= 1, or 0 for one on a CUDA device and the machine's default on CPU")
        _check(self.linear_dtype in VISION_LINEAR_DTYPES, "linear_dtype", self.linear_dtype,
               f"use one of {', '.join(map(repr, VISION_LINEAR_DTYPES))}")
        _check(self.linear_dtype != "fp8" or (self.device.startswith("cuda") and self.dtype == "bfloat16"),
               "linear_dtype", self.linear_dtype,
               f"FP8 linears need device cuda[:N] (compute capability >= 8.9) and dtype bfloat16, but this stage has "
               f"device {self.device!r} and dtype {self.dtype!r}; set those or use linear_dtype 'native'")


@dataclass(frozen=True)
class SamplingDefaults:
    """What a request gets for every sampling field it leaves unset."""

    temperature: float = 0.7
    top_k: int = 20
    top_p: float = 0.8
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 512

    def __post_init__(self) -> None:
        _check(self.temperature >= 0, "temperature", self.temperature, "use a value >= 0 (0 is greedy)")
        _check(0 < self.top_p <= 1, "top_p", self.top_p, "use a value in (0, 1]")
        _check(self.top_k >= 0, "top_k", self.top_k, "use a value >= 0 (0 disables)")
        _check(0 <= self.min_p <= 1, "min_p", self.min_p, "use a value in [0, 1]")
        _check(self.repetition_penalty > 0, "repetition_penalty", self.repetition_penalty, "use a value > 0 (1 is off)")
        _check(self.max_tokens >= 1, "max_tokens", self.max_tokens, "use a value >= 1")


@dataclass(frozen=True)
class GatewayConfig:
    """The public API process."""

    server: ServerConfig = field(default_factory=lambda: ServerConfig(port=50051))
    api_keys: tuple[str, ...] = ()  # empty: no authentication
    sampling: SamplingDefaults = field(default_factory=SamplingDefaults)
    stage_timeout_s: float = 5.0  # how long to wait for a stage connection before UNAVAILABLE
    max_audio_seconds: float = 600.0  # longest audio clip (or video sound track) a request may carry
    max_video_frames: int = 768  # most frames sampled from one video
    video_fps: float = 2.0  # frames sampled per second of video (whole M-RoPE times need 2 / fps * 13 whole)
    # Chat streams one replica serves at once; past it RESOURCE_EXHAUSTED with RetryInfo, before any media is decoded
    # (decoded media is held in memory until the stages took it). Scale gateways on omnimesh_requests_in_flight.
    max_in_flight: int = 1024
    # Text spelling a special token (`<|im_start|>`) becomes that token; off, it is plain text, so a user cannot forge
    # turns or system prompts through the chat template. Turn on only when every client is trusted.
    allow_special_tokens: bool = False

    def __post_init__(self) -> None:
        _check(self.max_in_flight >= 1, "max_in_flight", self.max_in_flight, "use a value >= 1")
        _check(self.stage_timeout_s > 0, "stage_timeout_s", self.stage_timeout_s, "use a positive number of seconds")
        _check(self.max_audio_seconds > 0, "max_audio_seconds", self.max_audio_seconds, "use a positive duration")
        _check(self.max_video_frames >= 2, "max_video_frames", self.max_video_frames,
               "use at least 2 (one temporal patch)")
        _check(self.video_fps > 0 and float(2 / self.video_fps * 13).is_integer(), "video_fps", self.video_fps,
               "use a rate where 2 / fps * 13 is whole, e.g. 2, 1, 0.5 or 13 (M-RoPE time positions are integers)")


@dataclass(frozen=True)
class MeshConfig:
    """A whole deployment."""

    model: str = "demo"  # checkpoint directory, or "demo" for the built-in demo checkpoint
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    thinker: StageConfig = field(default_factory=StageConfig)
    vision: StageConfig = field(default_factory=StageConfig)  # every stage on: `make serve` hears, sees, speaks
    audio: StageConfig = field(default_factory=StageConfig)
    talker: StageConfig = field(default_factory=StageConfig)

    def __post_init__(self) -> None:
        for name in STAGES:
            if name != "vision":
                _check(self.stage(name).linear_dtype == "native", f"{name}.linear_dtype",
                       self.stage(name).linear_dtype, "only the vision stage has FP8 linears; leave it 'native'")

    def stage(self, name: str) -> StageConfig:
        if name not in STAGES:
            raise ValueError(f"stage {name!r} is not one of {STAGES}")
        return getattr(self, name)


def _check(ok: bool, name: str, value: Any, fix: str) -> None:
    if not ok:
        raise ValueError(f"config field {name}={value!r} is invalid: {fix}")


def from_dict(cls: type, data: dict[str, Any], path: str = "") -> Any:
    """Builds dataclass `cls` from nested dicts, rejecting unknown keys by their dotted path."""
    if not isinstance(data, dict):
        raise ValueError(f"config section {path or '<root>'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown config key(s) {[f'{path}{k}' for k in unknown]}; known: {sorted(names)}")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = from_dict(hint, value or {}, f"{path}{key}.")
        elif typing.get_origin(hint) is tuple:
            if isinstance(value, (str, bytes)):  # a bare string would become a tuple of its characters
                raise ValueError(f"config key {path}{key} must be a list, got the string {value!r}; write [{value!r}]")
            kwargs[key] = tuple(value or ())
        else:
            kwargs[key] = value
    try:
        return cls(**kwargs)
    except ValueError as e:
        raise ValueError(str(e).replace("config field ", f"config field {path}", 1)) from None  # the dotted key
    except TypeError as e:
        raise ValueError(f"config section {path or '<root>'}: {e}") from None


def to_dict(config: Any) -> dict[str, Any]:
    """The plain-dict form, for writing a resolved config for child processes."""
    out = dataclasses.asdict(config)
    return _tuples_to_lists(out)


def _tuples_to_lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _tuples_to_lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tuples_to_lists(v) for v in value]
    return value


def load_mesh_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> MeshConfig:
    """The YAML at `path` (defaults when None) with dotted-key overrides applied, e.g. {"thinker.device": "cuda"}."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except yaml.YAMLError as err:  # a config is user input: a ValueError naming the file, as for a bad field
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise ValueError(f"{path} is not valid YAML: {getattr(err, 'problem', None) or err}{where}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(f"{path} must hold a mapping of sections (thinker:, vision:, ...), not "
                             f"{type(loaded).__name__}")
        data = loaded or {}
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            if node.get(p) is None:  # absent, or left empty in the YAML (`thinker:`)
                node[p] = {}
            node = node[p]
        node[leaf] = value
    return from_dict(MeshConfig, data)


def write_mesh_config(config: MeshConfig, path: Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))

"""Mesh configuration: one YAML for the whole deployment, one strictly checked frozen section per stage; flags
override."""
from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from runtime.config_section import ConfigError, Items, Section, check, config_section, from_dict

__all__ = ["STAGES", "VISION_LINEAR_DTYPES", "AudioStageConfig", "ConfigError", "EncoderConfig", "EngineConfig",
           "GatewayConfig", "MeshConfig", "SamplingDefaults", "ServerConfig", "SpeechConfig", "StageConfig",
           "StageTlsConfig", "TalkerStageConfig", "ThinkerStageConfig", "VisionStageConfig", "from_dict",
           "load_mesh_config", "to_dict", "write_mesh_config"]

STAGES = ("thinker", "vision", "audio", "talker")
# The vision tower's block linears (qkv, proj, fc1, fc2): "native" runs them in the stage's dtype, "fp8" in e4m3 with
# per-row scales (FP8 tensor cores: compute capability >= 8.9, e.g. H100/H200; dtype bfloat16).
VisionLinearDtype = Literal["native", "fp8"]
VISION_LINEAR_DTYPES: tuple[str, ...] = typing.get_args(VisionLinearDtype)
BLOCK_SIZES = (8, 16, 32, 64, 128)
ThinkerRouting = Literal["prefix_aware", "least_load", "round_robin"]


@config_section
class ServerConfig:
    """How one process listens: gRPC and Prometheus ports, message limits, keepalive, drain."""

    host: StrictStr = "127.0.0.1"
    port: StrictInt = Field(0, ge=0, le=65535, description="0 picks a free port")
    metrics_port: StrictInt = Field(0, ge=-1, le=65535, description="0 picks a free port, -1 disables the endpoint")
    # tensors travel in 1 MiB chunks (docs/grpc-transport.md); this only bounds one message
    max_message_bytes: StrictInt = Field(16 << 20, ge=2 << 20, description="it must exceed the 1 MiB tensor chunk")
    # clients ping every 30 s; the server accepts pings every 10 s even on a silent stream (docs/grpc-transport.md)
    keepalive_time_ms: StrictInt = Field(30_000, ge=10_000, description="pings more often than every 10 s get "
                                                                        "connections closed for 'too many pings'")
    # makes clients re-resolve DNS so new pods get traffic (docs/grpc-transport.md)
    max_connection_age_ms: StrictInt = Field(300_000, ge=1)
    max_connection_age_grace_ms: StrictInt = Field(600_000, ge=0)  # long enough for a long generation to finish
    drain_grace_s: StrictFloat = Field(30.0, ge=0)
    # TLS from PEM files (e.g. a cert-manager Secret mounted in the pod): a certificate and its key make the port
    # TLS-only; a client CA also requires every client to present a certificate it signed (mutual TLS)
    tls_cert_file: StrictStr = ""
    tls_key_file: StrictStr = ""
    tls_client_ca_file: StrictStr = ""
    # a second, plaintext port serving only grpc.health.v1, for probes that cannot speak TLS (kubelet's gRPC probes);
    # -1: none, 0: a free port
    health_port: StrictInt = Field(-1, ge=-1, le=65535)
    # several processes of this stage listen on `port`, the kernel spreading connections between them (SO_REUSEPORT:
    # `omnimesh up` sets it for gateway.replicas > 1); off, a second server on a port in use fails to start
    share_port: StrictBool = False

    def __post_init__(self) -> None:
        check(bool(self.tls_cert_file) == bool(self.tls_key_file), "tls_key_file", self.tls_key_file,
              "set tls_cert_file and tls_key_file together, or neither (plaintext)")
        check(not self.tls_client_ca_file or bool(self.tls_cert_file), "tls_client_ca_file", self.tls_client_ca_file,
              "mutual TLS needs the server's own tls_cert_file and tls_key_file too")


@config_section
class StageTlsConfig:
    """How the gateway dials the stages when their ports are TLS: the CA their certificates chain to, and the
    certificate it presents to stages that require one (mutual TLS). Empty ca_file: plaintext."""

    ca_file: StrictStr = ""
    cert_file: StrictStr = ""
    key_file: StrictStr = ""

    def __post_init__(self) -> None:
        check(bool(self.cert_file) == bool(self.key_file), "key_file", self.key_file,
              "set cert_file and key_file together, or neither")
        check(not self.cert_file or bool(self.ca_file), "ca_file", self.ca_file,
              "a client certificate is only sent over TLS: set ca_file to the stages' CA")


@config_section
class EngineConfig:
    """Decoder engine knobs (the thinker)."""

    max_num_seqs: StrictInt = Field(32, ge=1)  # rows in one step
    # admitted beyond the running rows; past it new requests get RESOURCE_EXHAUSTED
    max_waiting_seqs: StrictInt = Field(256, ge=0, description="0: no queue beyond the running rows")
    max_batch_tokens: StrictInt = Field(2048, ge=1)  # tokens in one step (prefill chunks + decode rows)
    block_size: StrictInt = 16  # tokens per KV block, one of BLOCK_SIZES
    num_kv_blocks: StrictInt = Field(0, ge=0, description="0 sizes the cache from kv_cache_bytes")
    kv_cache_bytes: StrictInt = Field(256 << 20, ge=1)
    max_model_len: StrictInt = Field(0, ge=0, description="0: the checkpoint's max_position_embeddings")
    # coalesce token deltas on a stream: each message costs ~40 us of CPU (docs/grpc-transport.md)
    token_flush_ms: StrictFloat = Field(15.0, ge=0)
    enable_prefix_cache: StrictBool = True  # reuse the KV of full blocks whose tokens and media match an earlier prompt
    # with steps run one ahead (GPU): launch the next decode step just before the running one ends, not at once, so
    # that requests arriving meanwhile join it (runtime/engine/engine.py); opt-in: no TTFT gain measured yet
    late_launch: StrictBool = False
    # Qwen3.5: sequences running at once hold one linear-attention state slot each (~49 MiB at 9B in fp32); with
    # all held, admission waits and the queue beyond it is max_waiting_seqs
    num_state_slots: StrictInt = Field(0, ge=0, description="0: max_num_seqs; ignored by attention-only models")
    # Qwen3.5's prefix cache: copies of the state where prompts' turns end and at their last full block, each one
    # slot's size (~49 MiB at 9B); a hit resumes from the deepest copy whose KV blocks are still cached
    num_state_snapshots: StrictInt = Field(8, ge=0, description="0: no prefix cache for a hybrid model")
    # CUDA graphs (GPU kernel path only): a step whose shape fits a bucket replays a graph captured at start.
    cuda_graphs: StrictBool = True
    decode_batch_buckets: Items[StrictInt] = ()  # rows of decode-only steps; () = 1, 2, 4, ... and max_num_seqs
    prefill_token_buckets: Items[StrictInt] = ()  # tokens of prefill/mixed steps, each <= max_batch_tokens; () = none

    def __post_init__(self) -> None:
        check(self.max_batch_tokens >= self.max_num_seqs, "max_batch_tokens", self.max_batch_tokens,
              f"must be >= max_num_seqs ({self.max_num_seqs}) so every running row can decode in one step")
        check(self.block_size in BLOCK_SIZES, "block_size", self.block_size, "use 8, 16, 32, 64 or 128")
        check(self.num_state_slots <= self.max_num_seqs, "num_state_slots", self.num_state_slots,
              f"must be <= max_num_seqs ({self.max_num_seqs}): a slot serves one running row, so more are never used")
        for name in ("decode_batch_buckets", "prefill_token_buckets"):
            ladder = getattr(self, name)
            check(all(v >= 1 for v in ladder) and list(ladder) == sorted(set(ladder)),
                  name, ladder, "use positive integers in strictly increasing order")
        for rows in self.decode_batch_buckets:
            check(rows <= self.max_num_seqs, "decode_batch_buckets", self.decode_batch_buckets,
                  f"bucket {rows} exceeds max_num_seqs ({self.max_num_seqs}): a step never holds more rows, so "
                  "its graph could never be replayed; drop it or raise max_num_seqs")
        for tokens in self.prefill_token_buckets:
            check(tokens <= self.max_batch_tokens, "prefill_token_buckets", self.prefill_token_buckets,
                  f"rung {tokens} exceeds max_batch_tokens ({self.max_batch_tokens}): the step budget never "
                  "reaches it, so its graph could never be replayed; drop it or raise max_batch_tokens")

    @property
    def state_slots(self) -> int:
        """The state slots a hybrid model gets: num_state_slots, or one per running row."""
        return self.num_state_slots or self.max_num_seqs

    @property
    def graph_decode_buckets(self) -> tuple[int, ...]:
        """The decode buckets to capture: the configured ones, else powers of two up to max_num_seqs and it."""
        if self.decode_batch_buckets:
            return self.decode_batch_buckets
        powers = [1 << i for i in range(self.max_num_seqs.bit_length()) if 1 << i < self.max_num_seqs]
        return (*powers, self.max_num_seqs)


@config_section
class EncoderConfig:
    """Encoder stage knobs (vision, audio): items of concurrent requests batch into one forward.

    Sizes count the stage's unit of work: patches for vision (4 patches make one thinker token), log-mel frames
    for audio (100 per second of sound: the defaults are ~655 s per forward and ~2,621 s per request).
    """

    # per forward; a 60 s, 2 fps, 448x448 video (47,040 patches) runs whole
    max_batch_size: StrictInt = Field(65536, ge=1)
    max_request_size: StrictInt = Field(262144, ge=1)  # per Encode call: 65,536 vision tokens, the thinker's context
    # how long a forward waits for more items once its first item is queued (not at all for a lone item that came more
    # than twice this long after the one before: runtime/encode_batcher.py)
    batch_wait_ms: StrictFloat = Field(5.0, ge=0, description="0: no waiting")
    # work accepted and not finished (read, queued, computing) past which new requests wait their turn, their
    # payload unread (it stays with the gateway): two whole requests; vision's ~616 MB of frames (60 s, 2 fps,
    # 448x448 videos: ~11), audio's ~87 min of samples
    max_pending_size: StrictInt = Field(524288, ge=1)
    # requests waiting for max_pending_size past which new ones get RESOURCE_EXHAUSTED (with a RetryInfo). A waiting
    # request costs the stage only its `start` message, and the gateways' own media budgets bound what they send
    max_waiting: StrictInt = Field(256, ge=0, description="0: no queue, refuse at once")

    def __post_init__(self) -> None:
        check(self.max_pending_size >= self.max_request_size, "max_pending_size", self.max_pending_size,
              f"use a value >= max_request_size ({self.max_request_size}), or the largest request never shares")


@config_section
class SpeechConfig:
    """Talker stage knobs: concurrent rows, frame limits, audio chunk sizes and the default sampling (the model's).

    Sizes count codec frames: 12.5 per second of 24 kHz audio (1,920 samples each). Requests override the
    sampling fields per call; unset fields take these.
    """

    # requests speaking at once; each holds one talker KV slot from its first token to its end
    max_rows: StrictInt = Field(32, ge=1)
    # requests queued for a row; past it new ones get RESOURCE_EXHAUSTED
    max_waiting: StrictInt = Field(256, ge=0, description="0: no queue")
    # codec frames per answer (~5.5 min); the reference's 4,096 talker tokens less the EOS
    max_frames: StrictInt = Field(4095, ge=1)
    # user-turn tokens of one talker prompt; a KV slot holds these + 10 + max_frames
    max_prompt_tokens: StrictInt = Field(8192, ge=1)
    # rows starting together share one prefill, right-padded to the longest: at most this many padded tokens (a
    # longer prompt still starts, alone)
    max_prefill_tokens: StrictInt = Field(4096, ge=1)
    first_chunk_frames: StrictInt = Field(4, ge=1)  # frames in the first audio chunk: 320 ms, a low time to first audio
    chunk_frames: StrictInt = Field(25, ge=1)  # frames in each later chunk (2 s): fewer, larger Code2Wav calls
    # frames the conv stack re-runs before a chunk; 11 covers its receptive field: exact
    left_context_frames: StrictInt = Field(11, ge=1)
    cuda_graphs: StrictBool = True  # on CUDA in bf16/fp16: fused frame step, captured per batch bucket at start
    # launch each frame before reading the last one's codes, so the engine's host work overlaps the GPU (fused frame
    # step only): +1 / +2 / +6% audio-s/s at c=1 / 8 / 32 on two H200s (bench/talker/NOTES.md)
    frames_ahead: StrictBool = True
    # Code2Wav decodes in flight at most: the engine collects each one once it is done instead of waiting for it on
    # the next iteration, so a long decode (32 streams: ~40 ms) leaves the frames running
    decodes_in_flight: StrictInt = Field(4, ge=1)
    # the engine's frames on a high-priority CUDA stream, Code2Wav on a default-priority one, so decodes in flight
    # fill the SMs the frames leave idle instead of slowing them. Two H200s, c=32: 4 in flight alone 207 audio-s/s,
    # with this 232-238, neither 212-223 (bench/talker/NOTES.md)
    prioritize_frames: StrictBool = True
    temperature: StrictFloat = Field(0.9, ge=0, description="0 is greedy")  # talker (codebook 0)
    top_k: StrictInt = Field(50, ge=0, description="0 disables top-k")
    top_p: StrictFloat = Field(1.0, gt=0, le=1, description="1 disables")
    # on the codebook-0 codes the request generated
    repetition_penalty: StrictFloat = Field(1.05, gt=0, description="1 disables")
    # code predictor (codebooks 1..15); greedy whenever the talker is
    predictor_temperature: StrictFloat = Field(1.0, ge=0, description="0 is greedy")
    predictor_top_k: StrictInt = Field(50, ge=0, description="0 disables top-k")
    predictor_top_p: StrictFloat = Field(0.8, gt=0, le=1, description="1 disables")


@config_section
class StageConfig:
    """What every stage's section holds: whether it runs, where, and how the gateway reaches it."""

    enabled: StrictBool = True
    device: StrictStr = "cpu"  # "cpu", "cuda" or "cuda:N"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # torch's CPU threads in this process; 0: one on a CUDA device, on CPU torch's default less one (see stage_device)
    cpu_threads: StrictInt = Field(0, ge=0, description="0: one on a CUDA device, all cores but one on CPU")
    # target the gateway dials, e.g. "dns:///thinker.omnimesh.svc:50051"; `omnimesh up` fills it
    address: StrictStr = ""
    # an engine step or encoder forward running longer than this (a hung device) turns the stage NOT_SERVING so it is
    # restarted. Far above any real step (the released thinker's longest prefill step takes about a second)
    stall_timeout_s: StrictFloat = Field(120.0, ge=0, description="0: never judge a step stalled")
    server: Section[ServerConfig] = Field(default_factory=ServerConfig)

    def __post_init__(self) -> None:
        check(re.fullmatch(r"cpu|cuda(:\d+)?", self.device) is not None, "device", self.device,
              "use cpu, cuda or cuda:N")


def _rank_gpus(device: str, world: int) -> list[int]:
    """GPU indices of a thinker replica's tensor-parallel ranks (none on CPU; `cuda` stands for cuda:0)."""
    if not device.startswith("cuda"):
        return []
    first = int(device.partition(":")[2] or 0)
    return list(range(first, first + world))


@config_section
class ThinkerStageConfig(StageConfig):
    """The thinker: its decoder engine and its replicas (data parallel; the gateway routes each request to one)."""

    engine: Section[EngineConfig] = Field(default_factory=EngineConfig)
    # processes `omnimesh up` starts, each with its own KV cache (Kubernetes: the chart's thinker.replicas)
    replicas: StrictInt = Field(1, ge=1)
    # ranks one thinker's decoder is split over (tensor parallel): rank 0 is the stage process, which starts the other
    # N - 1; on CUDA rank r runs on cuda:k+r from the replica's device cuda:k, on CPU every rank on the CPU (gloo).
    # N must divide the checkpoint's head counts and expert widths (checked at load, naming the field)
    tensor_parallel: StrictInt = Field(1, ge=1, description="1: one process, no split")
    # one device per replica, e.g. [cuda:0, cuda:1]; empty: every replica on `device`
    devices: Items[StrictStr] = ()
    # targets of replicas the gateway routes between, e.g. what `omnimesh up` started; beside `address`, which
    # may name a headless Service (dns:///thinker-headless:50051) whose every pod IP is a replica
    addresses: Items[StrictStr] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        check(not self.devices or len(self.devices) == self.replicas, "devices", self.devices,
              f"list one device per replica ({self.replicas}), or none to put every replica on `device`")
        for device in self.devices:
            check(re.fullmatch(r"cpu|cuda(:\d+)?", device) is not None, "devices", self.devices,
                  f"{device!r} is not a device: use cpu, cuda or cuda:N")
        # one-rank replicas may share a GPU (two released thinkers fit on an H200); split ones must not overlap
        ranks = [set(_rank_gpus(d, self.tensor_parallel)) for d in self.devices] if self.tensor_parallel > 1 else []
        check(all(not (a & b) for i, a in enumerate(ranks) for b in ranks[i + 1:]), "devices", self.devices,
              f"with tensor_parallel {self.tensor_parallel} each replica's ranks take the GPUs from its device on; "
              "space the replicas' devices so those GPUs do not overlap")
        check(not (self.address and self.addresses), "addresses", self.addresses,
              "set address (one target, or a headless Service's DNS name) or addresses (a list), not both")

    def replica_device(self, index: int) -> str:
        return self.devices[index] if self.devices else self.device

    @property
    def targets(self) -> tuple[str, ...]:
        """What the gateway dials: the address list, else the one address (a DNS name stands for its pods)."""
        return self.addresses or ((self.address,) if self.address else ())


@config_section
class VisionStageConfig(StageConfig):
    """The vision encoder: its batching (sizes in patches) and its block linears' dtype."""

    linear_dtype: VisionLinearDtype = "native"
    encoder: Section[EncoderConfig] = Field(default_factory=EncoderConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.linear_dtype != "fp8" or (self.device.startswith("cuda") and self.dtype == "bfloat16"),
              "linear_dtype", self.linear_dtype,
              f"FP8 linears need device cuda[:N] (compute capability >= 8.9) and dtype bfloat16, but this stage has "
              f"device {self.device!r} and dtype {self.dtype!r}; set those or use linear_dtype 'native'")


@config_section
class AudioStageConfig(StageConfig):
    """The audio encoder: its batching (sizes in log-mel frames)."""

    encoder: Section[EncoderConfig] = Field(default_factory=EncoderConfig)


@config_section
class TalkerStageConfig(StageConfig):
    """The talker: its rows, frames, audio chunks and default sampling."""

    speech: Section[SpeechConfig] = Field(default_factory=SpeechConfig)


@config_section
class SamplingDefaults:
    """What a request gets for every sampling field it leaves unset."""

    temperature: StrictFloat = Field(0.7, ge=0, description="0 is greedy")
    top_k: StrictInt = Field(20, ge=0, description="0 disables")
    top_p: StrictFloat = Field(0.8, gt=0, le=1, description="1 disables")
    min_p: StrictFloat = Field(0.0, ge=0, le=1, description="0 disables")
    repetition_penalty: StrictFloat = Field(1.0, gt=0, description="1 disables")
    max_tokens: StrictInt = Field(512, ge=1)


@config_section
class GatewayConfig:
    """The public API process."""

    server: Section[ServerConfig] = Field(default_factory=lambda: ServerConfig(port=50051))
    # processes `omnimesh up` starts, sharing server.port (each connection is served by one of them): one gateway's
    # event loop answers a few hundred transcriptions a second (bench/asr/NOTES.md); Kubernetes: the chart's
    # stages.gateway.replicas, one pod each behind the Service
    replicas: StrictInt = Field(1, ge=1)
    api_keys: Items[StrictStr] = ()  # empty: no authentication
    sampling: Section[SamplingDefaults] = Field(default_factory=SamplingDefaults)
    stage_timeout_s: StrictFloat = Field(5.0, gt=0)  # how long to wait for a stage connection before UNAVAILABLE
    # longest audio clip (or video sound track) a request may carry
    max_audio_seconds: StrictFloat = Field(600.0, gt=0)
    max_video_frames: StrictInt = Field(768, ge=2, description="2 frames make one temporal patch")  # from one video
    video_fps: StrictFloat = 2.0  # frames sampled per second of video (whole M-RoPE times need 2 / fps * 13 whole)
    # Chat streams one replica serves at once; past it RESOURCE_EXHAUSTED with RetryInfo, before any media is decoded
    # (decoded media is held in memory until the stages took it). Scale gateways on omnimesh_requests_in_flight.
    max_in_flight: StrictInt = Field(1024, ge=1)
    # Decoded media (frames, samples) this replica holds at once, estimated from each item's header before decoding;
    # a request that would pass it waits its turn as RESOURCE_EXHAUSTED with RetryInfo (one alone is always admitted)
    max_media_bytes: StrictInt = Field(2 << 30, ge=1 << 20)
    stage_tls: Section[StageTlsConfig] = Field(default_factory=StageTlsConfig)
    # Text spelling a special token (`<|im_start|>`) becomes that token; off, it is plain text, so a user cannot forge
    # turns or system prompts through the chat template. Turn on only when every client is trusted.
    allow_special_tokens: StrictBool = False
    # API keys whose requests may spell special tokens when allow_special_tokens is off (a trusted back end beside
    # public clients); each authenticates like api_keys. Also from $OMNIMESH_SPECIAL_TOKEN_API_KEYS (comma-separated).
    special_token_api_keys: Items[StrictStr] = ()
    # How a request picks its thinker replica (gateway/routing/): prefix_aware, the one holding the longest cached
    # prefix of its prompt among those within thinker_routing_margin of the least loaded; least_load; round_robin
    thinker_routing: ThinkerRouting = "prefix_aware"
    # requests in flight (running + waiting) a replica may hold beyond the least-loaded one's, once given this one,
    # and still be picked for its cache: moving a conversation recomputes its whole history, idling a GPU wastes it
    thinker_routing_margin: StrictInt = Field(8, ge=0, description="0: always the least loaded")
    # how often a DNS thinker address (a headless Service) is resolved again, so pods that came or went are seen
    thinker_resolve_s: StrictFloat = Field(10.0, gt=0)
    # a call whose first token (or, with none, its end) takes this long is logged as a warning with its time by
    # phase and the stages' own queue and compute times (gateway/timeline.py); the TTFT SLO's threshold, so the log
    # names each request that burns its budget (deploy/prometheus/rules.yaml)
    slow_first_token_s: StrictFloat = Field(2.5, ge=0, description="0: never logged")

    def __post_init__(self) -> None:
        check(self.video_fps > 0 and float(2 / self.video_fps * 13).is_integer(), "video_fps", self.video_fps,
              "use a rate where 2 / fps * 13 is whole, e.g. 2, 1, 0.5 or 13 (M-RoPE time positions are integers)")


@config_section
class MeshConfig:
    """A whole deployment: the gateway's section and one typed section per stage."""

    model: StrictStr = "demo"  # checkpoint directory, or "demo" for the built-in demo checkpoint
    gateway: Section[GatewayConfig] = Field(default_factory=GatewayConfig)
    thinker: Section[ThinkerStageConfig] = Field(default_factory=ThinkerStageConfig)
    # every stage on: `make serve` hears, sees, speaks
    vision: Section[VisionStageConfig] = Field(default_factory=VisionStageConfig)
    audio: Section[AudioStageConfig] = Field(default_factory=AudioStageConfig)
    talker: Section[TalkerStageConfig] = Field(default_factory=TalkerStageConfig)

    def stage(self, name: str) -> StageConfig:
        if name not in STAGES:
            raise ValueError(f"stage {name!r} is not one of {STAGES}")
        return getattr(self, name)


def to_dict(config: Any) -> dict[str, Any]:
    """The plain-dict form, for writing a resolved config for child processes."""
    return _tuples_to_lists(dataclasses.asdict(config))


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
            raise ConfigError(f"{path} is not valid YAML: {getattr(err, 'problem', None) or err}{where}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path} must hold a mapping of sections (thinker:, vision:, ...), not "
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

"""The AuT audio encoder: log-mel clips in, thinker-width embeddings out, many clips per forward, no host sync."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from runtime.audio_lengths import audio_token_count
from runtime.checkpoint.family import read_family
from runtime.weights import load_component
from services.audio.model.attention import select_attention
from services.audio.model.config import AudioEncoderConfig
from services.audio.model.graphs import DEFAULT_GRAPH_CHUNKS, CudaGraphs
from services.audio.model.layers import EncoderLayer, activation
from services.audio.model.plan import DEFAULT_CHUNKS_PER_LAUNCH, AudioBatchPlan, plan_batch
from services.audio.model.stem import ConvStem, sinusoid_table, stem_weights
from runtime.transfer import to_device

# `-hf` Qwen3-ASR keeps the AuT's two output linears apart, as its multimodal projector.
PROJECTOR_NAMES = {"linear_1.": "proj1.", "linear_2.": "proj2."}


class AudioEncoder(nn.Module):
    """Qwen3-Omni's AuT. Input: a list of clips, each a [mel_bins, T_i] log-mel (on the encoder's device for a
    sync-free forward; host tensors are copied over). Output: one [audio_token_count(T_i), output_dim] tensor per
    clip, views of one packed tensor (`encode` returns it packed, in clip order).

    A clip's output does not depend on the other clips in the batch (see `plan.py` for the padding rule).
    With `cuda_graphs` (CUDA only), batches of at most `graph_max_chunks` 1 s chunks replay a captured graph
    (graphs.py) instead of launching every kernel from Python.
    """

    def __init__(self, config: AudioEncoderConfig, attention: str = "auto",
                 chunks_per_launch: int = DEFAULT_CHUNKS_PER_LAUNCH, cuda_graphs: bool = False,
                 graph_max_chunks: int = DEFAULT_GRAPH_CHUNKS) -> None:
        super().__init__()
        self.config = config
        self.attention = attention
        self.chunks_per_launch = chunks_per_launch
        self.graphs = CudaGraphs(config, graph_max_chunks) if cuda_graphs else None
        self.stem = ConvStem(config)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.ln_post = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.proj1 = nn.Linear(config.d_model, config.d_model)
        self.act = activation(config.activation_function)
        self.proj2 = nn.Linear(config.d_model, config.output_dim)

    @classmethod
    def load(cls, ckpt_dir: Path | str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
             attention: str = "auto", chunks_per_launch: int = DEFAULT_CHUNKS_PER_LAUNCH,
             cuda_graphs: bool = False) -> AudioEncoder:
        """Reads `config.json` and only the audio tower's tensors (and `-hf` Qwen3-ASR's projector) of an HF-format
        checkpoint."""
        config = AudioEncoderConfig.from_checkpoint(ckpt_dir)
        tensors = load_audio_tensors(Path(ckpt_dir), device, dtype)
        return cls.from_state_dict(config, tensors, device, dtype, attention, chunks_per_launch, cuda_graphs)

    @classmethod
    def from_state_dict(cls, config: AudioEncoderConfig, tensors: dict[str, torch.Tensor],
                        device: torch.device | str, dtype: torch.dtype, attention: str = "auto",
                        chunks_per_launch: int = DEFAULT_CHUNKS_PER_LAUNCH,
                        cuda_graphs: bool = False) -> AudioEncoder:
        """From tensors named as in the checkpoint under `thinker.audio_tower.` (prefix stripped)."""
        device = torch.device(device)
        if cuda_graphs and device.type != "cuda":
            raise ValueError(f"cuda_graphs=True needs a CUDA device, got {device}: pass cuda_graphs=False")
        with torch.device("meta"):
            model = cls(config, attention, chunks_per_launch, cuda_graphs)
        state = {name: t.to(device, dtype) for name, t in to_module_names(tensors, config).items()}
        model.load_state_dict(state, strict=True, assign=True)
        model.stem.register_buffer(
            "positions", sinusoid_table(config.chunk_tokens, config.d_model).to(device, dtype), persistent=False
        )
        select_attention(attention, device, dtype)  # fail at load, not on the first request
        return model.eval().requires_grad_(False)

    @property
    def device(self) -> torch.device:
        return self.proj2.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.proj2.weight.dtype

    def plan(self, frame_counts: list[int]) -> AudioBatchPlan:
        """The host-side plan for clips of these lengths (call from any thread; it touches no device)."""
        return plan_batch(frame_counts, self.config, self.chunks_per_launch)

    def token_counts(self, frame_counts: list[int]) -> list[int]:
        return [audio_token_count(t, self.config.chunk_frames) for t in frame_counts]

    @torch.inference_mode()
    def forward(self, mels: list[torch.Tensor]) -> list[torch.Tensor]:
        packed = self.encode(mels)
        return list(packed.split(self.token_counts([mel.shape[1] for mel in mels]), dim=0))

    @torch.inference_mode()
    def encode(self, mels: list[torch.Tensor], plan: AudioBatchPlan | None = None) -> torch.Tensor:
        """[sum of token counts, output_dim] for clips packed in order. `plan` (from `self.plan`, on the host or
        already moved) is used on the eager path; a batch that fits a CUDA graph replays one instead."""
        if not mels:
            raise ValueError("encode needs at least one clip")
        frame_counts = [mel.shape[1] for mel in mels]
        if self.graphs is not None and self.device.type == "cuda" and self.graphs.fits(frame_counts):
            return self.graphs.run(self.run_plan, mels, self.device, self.dtype)
        plan = self.plan(frame_counts) if plan is None else plan
        if plan.cu_seqlens.device != self.device:
            plan = plan.to(self.device, self.dtype)
        zero = mels[0].new_zeros(1, mels[0].shape[0])  # the plan's zero frame: every padded frame index points here
        mel = to_device(torch.cat([*(m.t() for m in mels), zero]), self.device, self.dtype)  # [total + 1, M]
        return self.run_plan(mel, plan)

    def run_plan(self, mel: torch.Tensor, plan: AudioBatchPlan) -> torch.Tensor:
        """mel: [frames, mel_bins] stacked in the plan's order, row `plan.zero_frame` zeros; plan on the device.
        Returns [plan.num_rows, output_dim]. Shapes follow the plan alone, so it can be captured in a graph."""
        if len(plan.launches) == 1:
            hidden = self.stem(mel, plan.launches[0])
        else:  # bounded working set: a 10-minute clip runs as several stem launches
            hidden = mel.new_empty(plan.num_rows, self.config.d_model)
            for launch in plan.launches:
                hidden[launch.row_offset:launch.row_offset + launch.num_rows] = self.stem(mel, launch)
        attend = select_attention(self.attention, self.device, self.dtype)
        layers = list(self.layers)
        normed = layers[0].self_attn_layer_norm(hidden)
        for i, layer in enumerate(layers):
            next_norm = layers[i + 1].self_attn_layer_norm if i + 1 < len(layers) else self.ln_post
            hidden, normed = layer(hidden, normed, plan, attend, next_norm)
        return self.proj2(self.act(self.proj1(normed)))  # normed = ln_post(last layer's output)


def load_audio_tensors(ckpt_dir: Path, device: torch.device | str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The encoder's tensors named as under Qwen3-Omni's `thinker.audio_tower.` (prefix stripped), whatever the
    checkpoint's layout."""
    family = read_family(ckpt_dir)
    if family.audio_prefix is None:
        raise ValueError(f"{ckpt_dir} holds {family.family}, which has no audio encoder; serve it without the audio "
                         f"stage (it needs {', '.join(family.stages)})")
    tensors = load_component(ckpt_dir, family.audio_prefix, device=device, dtype=dtype)
    if family.projector_prefix is not None:
        projector = load_component(ckpt_dir, family.projector_prefix, device=device, dtype=dtype)
        for name, t in projector.items():
            ours = next((new + name[len(old):] for old, new in PROJECTOR_NAMES.items() if name.startswith(old)), None)
            if ours is None:
                raise KeyError(f"{family.projector_prefix}{name}: not a tensor of Qwen3-ASR's two-linear projector")
            tensors[ours] = t
    return tensors


def to_module_names(tensors: dict[str, torch.Tensor], config: AudioEncoderConfig) -> dict[str, torch.Tensor]:
    """Checkpoint names -> this module's: stem weights move under `stem.` in the stem's layout, q/k/v are
    concatenated into `qkv`."""
    out: dict[str, torch.Tensor] = {}
    stem: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        if name.startswith("positional_embedding"):
            continue  # a fixed table some exports include; rebuilt from its formula
        if name.startswith(("conv2d", "conv_out")):
            stem[name] = tensor
        elif not any(f".self_attn.{p}_proj." in name for p in "qkv"):
            out[name] = tensor
    out.update({f"stem.{name}": t for name, t in stem_weights(stem, config).items()})
    for i in range(config.encoder_layers):
        for kind in ("weight", "bias"):
            parts = [tensors[f"layers.{i}.self_attn.{p}_proj.{kind}"] for p in "qkv"]
            out[f"layers.{i}.self_attn.qkv.{kind}"] = torch.cat(parts, dim=0)
    return out

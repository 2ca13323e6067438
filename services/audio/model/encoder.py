"""The AuT audio encoder: log-mel clips in, thinker-width embeddings out, many clips per forward, no host sync."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from runtime.weights import load_component
from services.audio.model.attention import select_attention
from services.audio.model.config import AudioEncoderConfig
from services.audio.model.layers import EncoderLayer, activation
from services.audio.model.plan import DEFAULT_CHUNKS_PER_LAUNCH, AudioBatchPlan, plan_batch
from services.audio.model.stem import ConvStem, sinusoid_table
from services.audio.transfer import to_device

WEIGHT_PREFIX = "thinker.audio_tower."


class AudioEncoder(nn.Module):
    """Qwen3-Omni's AuT. Input: a list of clips, each a [mel_bins, T_i] log-mel (on the encoder's device for a
    sync-free forward; host tensors are copied over). Output: one [audio_token_count(T_i), output_dim] tensor per
    clip, views of one packed tensor (`encode` returns it packed, in clip order).

    A clip's output does not depend on the other clips in the batch (see `plan.py` for the padding rule).
    """

    def __init__(self, config: AudioEncoderConfig, attention: str = "auto",
                 chunks_per_launch: int = DEFAULT_CHUNKS_PER_LAUNCH) -> None:
        super().__init__()
        self.config = config
        self.attention = attention
        self.chunks_per_launch = chunks_per_launch
        self.stem = ConvStem(config)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.ln_post = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.proj1 = nn.Linear(config.d_model, config.d_model)
        self.act = activation(config.activation_function)
        self.proj2 = nn.Linear(config.d_model, config.output_dim)

    @classmethod
    def load(cls, ckpt_dir: Path | str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
             attention: str = "auto", chunks_per_launch: int = DEFAULT_CHUNKS_PER_LAUNCH) -> AudioEncoder:
        """Reads `config.json` and only the `thinker.audio_tower.*` tensors of an HF-format checkpoint."""
        config = AudioEncoderConfig.from_checkpoint(ckpt_dir)
        tensors = load_component(Path(ckpt_dir), WEIGHT_PREFIX, device=device, dtype=dtype)
        return cls.from_state_dict(config, tensors, device, dtype, attention, chunks_per_launch)

    @classmethod
    def from_state_dict(cls, config: AudioEncoderConfig, tensors: dict[str, torch.Tensor],
                        device: torch.device | str, dtype: torch.dtype, attention: str = "auto",
                        chunks_per_launch: int = DEFAULT_CHUNKS_PER_LAUNCH) -> AudioEncoder:
        """From tensors named as in the checkpoint under `thinker.audio_tower.` (prefix stripped)."""
        with torch.device("meta"):
            model = cls(config, attention, chunks_per_launch)
        state = {name: t.to(device, dtype) for name, t in to_module_names(tensors, config.encoder_layers).items()}
        model.load_state_dict(state, strict=True, assign=True)
        model.stem.register_buffer(
            "positions", sinusoid_table(config.chunk_tokens, config.d_model).to(device, dtype), persistent=False
        )
        select_attention(attention, torch.device(device), dtype)  # fail at load, not on the first request
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

    @torch.inference_mode()
    def forward(self, mels: list[torch.Tensor]) -> list[torch.Tensor]:
        plan = self.plan([mel.shape[1] for mel in mels])
        return list(self.encode(mels, plan).split(plan.token_counts, dim=0))

    @torch.inference_mode()
    def encode(self, mels: list[torch.Tensor], plan: AudioBatchPlan) -> torch.Tensor:
        """[sum of token counts, output_dim] for clips packed in order. `plan` may be on the host or already moved."""
        if plan.cu_seqlens.device != self.device:
            plan = plan.to(self.device, self.dtype)
        zero = mels[0].new_zeros(mels[0].shape[0], 1)  # every padded frame index points here
        mel = to_device(torch.cat([*mels, zero], dim=1), self.device, self.dtype)  # [M, total_frames + 1]
        hidden = mel.new_empty(plan.num_tokens, self.config.d_model)
        for launch in plan.launches:  # bounded working set: a 10-minute clip runs as several stem launches
            hidden[launch.token_offset:launch.token_offset + launch.num_tokens] = self.stem(mel, launch)
        attend = select_attention(self.attention, self.device, self.dtype)
        for layer in self.layers:
            hidden = layer(hidden, plan, attend)
        return self.proj2(self.act(self.proj1(self.ln_post(hidden))))


def to_module_names(tensors: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Checkpoint names -> this module's: stem weights move under `stem.`, q/k/v are concatenated into `qkv`."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        if name.startswith("positional_embedding"):
            continue  # a fixed table some exports include; rebuilt from its formula
        if name.startswith(("conv2d", "conv_out")):
            out[f"stem.{name}"] = tensor
        elif not any(f".self_attn.{p}_proj." in name for p in "qkv"):
            out[name] = tensor
    for i in range(num_layers):
        for kind in ("weight", "bias"):
            parts = [tensors[f"layers.{i}.self_attn.{p}_proj.{kind}"] for p in "qkv"]
            out[f"layers.{i}.self_attn.qkv.{kind}"] = torch.cat(parts, dim=0)
    return out

"""Speech about a video heard with its sound track, through the whole mesh, equals transformers' `generate`."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from runtime.vision_processing import VisionProcessingConfig
from tests.integration.mesh_process import OMNIMESH, Proc, start


@pytest.fixture(scope="module")
def all_stages(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    from gateway.cli.up import MESH_PREFIX

    cfg = tmp_path_factory.mktemp("all") / "mesh.yaml"
    cfg.write_text(yaml.safe_dump({"talker": {"speech": {"max_frames": 48}},
                                   "thinker": {"engine": {"kv_cache_bytes": 16 << 20}}}))
    proc = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--config", str(cfg)], MESH_PREFIX,
                 timeout=240)
    yield proc
    assert proc.stop() == 0


def test_info_describes_every_stage(all_stages: Proc) -> None:
    from omnimesh.v1 import omni_pb2
    from tests.integration.test_mesh_chat import mesh_info

    got = mesh_info(f"127.0.0.1:{all_stages.ports['gateway']['grpc_port']}")
    assert [s.stage for s in got.stages] == ["thinker", "vision", "audio", "talker"]
    assert all(s.build and s.model and s.device for s in got.stages)
    assert sorted(got.input_modalities) == ["audio", "image", "text", "video"]
    assert list(got.output_modalities) == [omni_pb2.MODALITY_TEXT, omni_pb2.MODALITY_AUDIO]
    assert sorted(got.voices) == ["aiden", "chelsie", "ethan"] and got.voices[0] == "ethan"  # default first


def test_greedy_speech_about_a_video_with_its_sound_equals_transformers(all_stages: Proc, hf_omni, demo_ckpt: Path,
                                                                        tmp_path: Path) -> None:
    from transformers import AutoTokenizer, WhisperFeatureExtractor

    from gateway.media.audio import extract_video_audio
    from gateway.media.vision import VisionMediaConfig, decode_video
    from tests.integration.media_files import mp4_with_sound
    from tests.integration.test_media_mesh import reference_interleaved_ids
    from tests.parity.talker.talker_reference import reference_speech
    from tests.parity.vision.test_vision_preprocess_parity import reference_video_pixel_values

    data, text, max_text = mp4_with_sound(), "What happens?", 12
    (tmp_path / "v.mp4").write_bytes(data)
    run = subprocess.run([OMNIMESH, "chat", "--addr", f"127.0.0.1:{all_stages.ports['gateway']['grpc_port']}",
                          "--json", "--greedy", "--codes", "--voice", "ethan", "--speak", str(tmp_path / "o.wav"),
                          "--max-tokens", str(max_text), "--video", str(tmp_path / "v.mp4"), "--use-audio-in-video",
                          text], capture_output=True, text=True, timeout=240)
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert run.returncode == 0, events
    assert not [e for e in events if e["type"] == "error"], events
    ours_text = [t for e in events if e["type"] == "text" for t in e["token_ids"]]
    ours_codes = [c for e in events if e["type"] == "audio" for c in e["codes"]]

    processing = VisionProcessingConfig.from_checkpoint(demo_ckpt)
    video = decode_video(data, "video", VisionMediaConfig.from_processing(processing))
    track = extract_video_audio(data, "video")
    grid = torch.tensor([[video.grid.t, video.grid.h, video.grid.w]])
    feats = WhisperFeatureExtractor.from_pretrained(demo_ckpt)(
        [track.samples], sampling_rate=16_000, padding=True, truncation=False, return_attention_mask=True,
        return_tensors="pt")
    ids = reference_interleaved_ids(AutoTokenizer.from_pretrained(demo_ckpt), text, grid, video.second_per_grid,
                                    track.token_count)
    ref = reference_speech(
        hf_omni, ids[0].tolist(), "ethan", eos=151645, max_text=max_text, max_frames=48,
        pixel_values_videos=reference_video_pixel_values(torch.from_numpy(np.ascontiguousarray(video.frames)),
                                                         processing),
        video_grid_thw=grid, video_second_per_grid=torch.tensor([video.second_per_grid]),
        input_features=feats["input_features"], feature_attention_mask=feats["attention_mask"],
        use_audio_in_video=True)
    assert ours_text == ref.generated
    frames = len(ref.spoken_text(151645)) - 2  # as in the text-only speech test: before the text runs out
    assert frames >= 8
    assert ours_codes[: frames * 16] == ref.codes.T.reshape(-1).tolist()[: frames * 16]

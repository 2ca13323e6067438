"""The talker stage on CUDA: fp32 greedy codes and streamed audio equal the CPU reference; grouped MoE == loop."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.talker.model.code2wav_stream import StreamingCode2Wav
from tests.talker_lockstep import lockstep_generate
from services.talker.model.load import TalkerModel, load_talker_model
from services.talker.model.moe import TalkerMoE
from services.talker.model.prompt import SpeechPrompt
from tests.parity.talker.talker_reference import assert_codes_match, text_prompt

pytestmark = pytest.mark.gpu


def test_greedy_codes_and_audio_match_cpu(demo_ckpt: Path, talker_model: TalkerModel) -> None:
    gpu = load_talker_model(demo_ckpt, "cuda", torch.float32)
    prompts = [SpeechPrompt(text_prompt([200, 300]), v) for v in ("ethan", "chelsie")]
    texts = [list(range(10, 30)), list(range(40, 45))]
    on_gpu = lockstep_generate(gpu, prompts, [iter(t) for t in texts], max_frames=16, record_margins=True)
    on_cpu = lockstep_generate(talker_model, prompts, [iter(t) for t in texts], max_frames=16)
    for ref, got in zip(on_cpu, on_gpu):
        assert_codes_match(ref.codes, got, min_frames=8)
    codes = on_cpu[0].codes
    waves = []
    torch.backends.cudnn.allow_tf32 = False  # cuDNN convolutions default to TF32, which is not an fp32 comparison
    for model, device in ((talker_model, "cpu"), (gpu, "cuda")):
        stream = StreamingCode2Wav(model.code2wav, 4, 8, 11)
        stream.push(codes.to(device))
        waves.append(torch.cat(stream.pull(final=True)).cpu())
    assert (waves[0] - waves[1]).abs().max().item() <= 1e-4


def test_bf16_grouped_moe_equals_the_loop() -> None:
    """Real talker MoE widths; same bf16 routing on both paths, so only GEMM accumulation order differs."""
    torch.manual_seed(0)
    block = TalkerMoE(dim=1024, num_experts=128, top_k=6, intermediate=384, shared_intermediate=768,
                      norm_topk_prob=True).cuda()  # fmt: skip
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.02)
    block = block.bfloat16()
    x = torch.randn(32, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        ref = block(x).float()
        block.experts.use_grouped_mm = True
        got = block(x).float()
    assert (got - ref).abs().max().item() <= 0.02 * ref.abs().max().item()


def test_frame_graphs_replay_the_fast_step(demo_ckpt: Path) -> None:
    """bf16 on the Triton kernels: captured frame graphs give the frames the same static buffers give eagerly.

    The prefills replay their graphs too. A capture also fails on any host sync, so passing proves the frame step
    and the prefill sync-free.
    """
    from services.talker.model.generate import TalkerRunner
    from services.talker.model.sampling import GREEDY, TalkerSampling

    model = load_talker_model(demo_ckpt, "cuda", torch.bfloat16)
    model.lm.use_grouped_mm(True)  # as the service sets it: the prefill graphs need the sync-free MoE
    samplings = [TalkerSampling(seed=1), GREEDY, TalkerSampling(seed=3, top_k=5)]
    results = []
    for graphs in (False, True):
        runner = TalkerRunner(model, 4, 64, fast=True, cuda_graphs=graphs, defer=graphs)
        runner.capture_graphs()
        states = [runner.start(SpeechPrompt(text_prompt([200 + i, 300]), v), 10 + i, smp, max_frames=6 + 3 * i)
                  for i, (v, smp) in enumerate(zip(("ethan", "chelsie", "aiden"), samplings))]  # fmt: skip
        for s in states:
            for t in range(4):
                s.push_text(40 + t)
            s.finish_text()
        frames: list[list[list[int]]] = [[] for _ in states]
        while active := [i for i, s in enumerate(states) if not s.finished]:
            # the graphs run is stepped as the engine steps it: codes read back late, through pinned memory
            for i, row in zip(active, runner.step([states[i] for i in active])):
                frames[i].append(row.tolist())
            runner.settle()
        results.append(frames)
    assert results[0] == results[1]


def test_prefill_graphs_of_several_rows_equal_eager_prefills(demo_ckpt: Path) -> None:
    """bf16: three prompts of different lengths in one padded prefill graph (bucket of 4 rows) give each row the
    talker state its own eager prefill gives, within bf16 rounding."""
    from services.talker.model.generate import RowStart, TalkerRunner

    model = load_talker_model(demo_ckpt, "cuda", torch.bfloat16)
    model.lm.use_grouped_mm(True)
    starts = [RowStart(SpeechPrompt(text_prompt(list(range(200, 200 + n))), v), 10 + n)
              for n, v in ((2, "ethan"), (9, "chelsie"), (5, "aiden"))]  # fmt: skip
    graphs = TalkerRunner(model, 4, 64, fast=True, cuda_graphs=True)
    graphs.capture_graphs()
    together = graphs.start_many(starts)
    eager = TalkerRunner(model, 4, 64)
    for start, state in zip(starts, together):
        (alone,) = eager.start_many([start])
        got = graphs.tables.hidden[state.slot].float()
        want = alone.last_hidden.float()
        assert state.cache_len == alone.cache_len
        assert (got - want).abs().max().item() <= 0.05 * want.abs().max().item()
        eager.release(alone)


def test_fast_step_gemm_pieces_match_their_references_in_bf16(demo_ckpt: Path) -> None:
    """On CUDA the fast step runs few-row o/down GEMMs in the skinny GEMM and computes the shared expert's gate inside
    its gate/up GEMM: both give what F.linear and the runtime's shared-expert reference give, within bf16 rounding."""
    import torch.nn.functional as F

    from runtime.kernels.moe_reference import SharedExpert, shared_expert_forward
    from services.talker.model.generate import TalkerRunner

    model = load_talker_model(demo_ckpt, "cuda", torch.bfloat16)
    runner = TalkerRunner(model, 4, 64, fast=True)
    assert runner.frames is not None
    step = runner.frames.step
    assert step.linear.enabled
    moe = model.lm.layers[0].mlp
    shared = SharedExpert(torch.cat((moe.shared_expert.gate_proj.weight, moe.shared_expert.up_proj.weight)),
                          moe.shared_expert.down_proj.weight, moe.shared_expert_gate.weight)  # fmt: skip
    for rows in (1, 3, 8, 9):  # 9: past SKINNY_ROWS, cuBLAS
        x = torch.randn(rows, model.cfg.lm.hidden_size, device="cuda", dtype=torch.bfloat16)
        routed = torch.randn_like(x)
        want = (routed + shared_expert_forward(x, shared)).float()
        got = step._shared_expert(x, step.talker[0].shared, routed).float()
        assert (got - want).abs().max().item() <= 0.02 * want.abs().max().item()
        o = step.talker[0].attn.o
        h = torch.randn(rows, o.shape[1], device="cuda", dtype=torch.bfloat16)
        want_o = F.linear(h, o).float()
        assert (step.linear(h, o).float() - want_o).abs().max().item() <= 0.02 * want_o.abs().max().item()

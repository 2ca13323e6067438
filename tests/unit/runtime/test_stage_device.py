"""A stage's configured device becomes the process's current CUDA device (Triton and graph captures follow it), and
its CPU threads follow `cpu_threads` (one by default on CUDA, where an idle OpenMP pool only spins; on CPU all of
torch's default but one, which the rest of the mesh needs)."""
import pytest
import torch

from runtime import stage_device as stage_device_module
from runtime.kernels.rmsnorm import fused_add_rmsnorm
from runtime.kernels.rmsnorm_reference import add_rmsnorm_reference
from runtime.stage_device import stage_device


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("default,want", [(4, 3), (2, 1), (1, 1)])
def test_a_cpu_stage_leaves_one_of_torchs_default_threads(torch_threads, monkeypatch, default, want):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(stage_device_module, "TORCH_DEFAULT_THREADS", default)
    torch.set_num_threads(default)
    assert stage_device("cpu") == torch.device("cpu")
    assert torch.get_num_threads() == want
    stage_device("cpu")  # a second stage built in the same process takes no second core off
    assert torch.get_num_threads() == want


def test_omp_num_threads_is_taken_as_the_operators_choice(torch_threads, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setattr(stage_device_module, "TORCH_DEFAULT_THREADS", 3)
    torch.set_num_threads(3)
    stage_device("cpu")
    assert torch.get_num_threads() == 3


def test_cpu_threads_caps_torchs_threads(torch_threads):
    torch.set_num_threads(2)
    stage_device("cpu", cpu_threads=1)
    assert torch.get_num_threads() == 1


@pytest.mark.gpu
def test_a_cuda_stage_takes_one_cpu_thread_unless_told_otherwise(torch_threads):
    torch.set_num_threads(4)
    stage_device("cuda")
    assert torch.get_num_threads() == 1
    stage_device("cuda", cpu_threads=3)
    assert torch.get_num_threads() == 3


@pytest.mark.gpu
def test_second_gpu_becomes_current_and_runs_triton():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    before = torch.cuda.current_device()
    try:
        device = stage_device("cuda:1")
        assert device == torch.device("cuda", 1) and torch.cuda.current_device() == 1
        x, residual = torch.randn(2, 2, 256, device=device, dtype=torch.bfloat16)
        weight = torch.ones(256, device=device, dtype=torch.bfloat16)
        normed, _ = fused_add_rmsnorm(x, residual, weight)  # the launch failed while cuda:0 was current
        torch.testing.assert_close(normed, add_rmsnorm_reference(x, residual, weight).normed)
    finally:
        torch.cuda.set_device(before)


@pytest.mark.gpu
def test_bare_cuda_resolves_to_the_current_index():
    assert stage_device("cuda") == torch.device("cuda", torch.cuda.current_device())

"""A stage's configured device becomes the process's current CUDA device (Triton and graph captures follow it), and
its CPU threads follow `cpu_threads` (one by default on CUDA, where an idle OpenMP pool only spins)."""
import pytest
import torch

from runtime.kernels.rmsnorm import fused_add_rmsnorm
from runtime.kernels.rmsnorm_reference import add_rmsnorm_reference
from runtime.stage_device import stage_device


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_cpu_device_is_returned_as_named_and_keeps_the_default_threads(torch_threads):
    torch.set_num_threads(2)
    assert stage_device("cpu") == torch.device("cpu")
    assert torch.get_num_threads() == 2


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

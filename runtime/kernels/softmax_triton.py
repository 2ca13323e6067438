"""A row softmax inside Triton kernels that rounds as PyTorch's CUDA softmax does, for kernels whose draws must
match a torch path (the talker's pick, the sampler's narrow draw)."""
from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def torch_softmax(x, LIBDEVICE_EXP: tl.constexpr):
    """exp(x - max) / sum over a 1-D block (-inf lanes give 0); libdevice's expf is the one PyTorch's CUDA kernels
    call (tl.exp is a faster approximation), but Triton's interpreter runs no extern functions: there NumPy's exp
    stands in (LIBDEVICE_EXP False)."""
    x = x - tl.max(x, 0)
    if LIBDEVICE_EXP:
        e = libdevice.exp(x)
    else:
        e = tl.exp(x)
    return tl.div_rn(e, tl.broadcast_to(tl.sum(e, 0), e.shape))


def libdevice_exp() -> bool:
    """The LIBDEVICE_EXP to launch with: False in Triton's interpreter."""
    return not triton.knobs.runtime.interpret

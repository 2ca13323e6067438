"""Tensor-parallel Thinker: the decoder split over N ranks (attention heads, MLP and expert widths), all-reduced
through torch.distributed; rank 0 is the stage process, ranks 1..N-1 worker processes it starts
(docs/tensor-parallel.md)."""

"""Code2Wav graph bookkeeping that needs no GPU: batch buckets and the errors that guard the CUDA-only path."""
from __future__ import annotations

import pytest

from services.talker.model.code2wav import Code2Wav
from services.talker.model.code2wav_graphs import GraphKey, batch_buckets, bucket_for, stream_signatures
from tests.unit.talker.talker_tiny import tiny_config


def test_buckets_are_powers_of_two_then_the_max() -> None:
    assert batch_buckets(32) == (1, 2, 4, 8, 16, 32)
    assert batch_buckets(24) == (1, 2, 4, 8, 16, 24)
    assert batch_buckets(1) == (1,)
    assert [bucket_for(b, batch_buckets(24)) for b in (1, 3, 9, 17, 24)] == [1, 4, 16, 24, 24]


def test_bucket_errors() -> None:
    with pytest.raises(ValueError, match="max_batch=0"):
        batch_buckets(0)
    with pytest.raises(ValueError, match="batch of 5 streams"):
        bucket_for(5, (1, 2, 4))


def test_graphs_need_cuda_and_room() -> None:
    c2w = Code2Wav(tiny_config().code2wav)
    with pytest.raises(ValueError, match="CUDA device"):
        c2w.enable_cuda_graphs()
    with pytest.raises(ValueError, match="max_graphs=0"):
        c2w.enable_cuda_graphs(max_graphs=0, capture=False)
    assert c2w.graphs is None


def test_stream_signatures_reach_the_full_context() -> None:
    assert stream_signatures(4, 25, 11) == [(4, 0), (25, 4), (25, 11)]
    assert stream_signatures(4, 4, 11) == [(4, 0), (4, 4), (4, 8), (4, 11)]
    assert stream_signatures(25, 25, 11) == [(25, 0), (25, 11)]


def test_warm_up_prepares_every_bucket_and_shares_window_inputs() -> None:
    c2w = Code2Wav(tiny_config().code2wav)
    graphs = c2w.enable_cuda_graphs(max_batch=3, capture=False)
    graphs.warm_up(4, 25, 11)
    assert list(graphs.entries) == [GraphKey(b, f, c) for f, c in ((25, 11), (25, 4), (4, 0)) for b in (1, 2, 3)]
    by_bucket = [e for k, e in graphs.entries.items() if k.bucket == 2]
    assert by_bucket[0].past is by_bucket[2].past and by_bucket[2].codes.shape == (2, 16, 4)
    assert by_bucket[2].context is None and by_bucket[0].context is not None
    assert by_bucket[0].context.shape == (2, 11, 32)


def test_warm_up_stops_at_max_graphs() -> None:
    graphs = Code2Wav(tiny_config().code2wav).enable_cuda_graphs(max_batch=4, max_graphs=4, capture=False)
    graphs.warm_up(4, 25, 11)
    assert list(graphs.entries) == [GraphKey(b, 25, 11) for b in (1, 2, 4)] + [GraphKey(1, 25, 4)]

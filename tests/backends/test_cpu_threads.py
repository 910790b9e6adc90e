"""The CPU kernels' parallel loop (``threads.h``): results do not depend on which thread ran a chunk, whether
the call ran on two threads or backed off to the caller alone on a busy machine, and callers on several Python
threads at once are safe. (A forked child must not run two threads after its parent did: libgomp's team does
not survive a fork, as for torch's own ops; verify's workers run one thread each.)"""

import threading

import pytest
import torch

import tileport
from tileport.backends.registry import REGISTRY
from tileport.bench import contention

pytestmark = pytest.mark.skipif(not REGISTRY.availability("tilelang").ok, reason="tilelang backend unavailable")

SHAPE = (1024, 96)  # enough elements for two threads (runtime.GRAIN)


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SHAPE, generator=g)
    w = torch.randn(SHAPE[1], generator=g)
    dy = torch.randn(SHAPE, generator=g)
    return x, w, dy


def _fwd_bwd(x, w, dy):
    y, rstd = tileport.rms_norm_fwd(x, w, eps=1e-6, backend="tilelang")
    dx, dw = tileport.rms_norm_bwd(x, rstd, dy, w, eps=1e-6, backend="tilelang")
    return y, dx, dw


def _one_thread(x, w, dy):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _fwd_bwd(x, w, dy)
    finally:
        torch.set_num_threads(before)


def test_callers_on_several_threads_get_the_one_thread_bits(two_threads):
    inputs = [_inputs(seed) for seed in range(4)]
    expected = [_one_thread(*i) for i in inputs]
    got, errors = [None] * 4, []

    def call(k):
        try:
            for _ in range(20):  # repeated, so calls overlap
                got[k] = _fwd_bwd(*inputs[k])
        except Exception as exc:  # surfaced below: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for want, have in zip(expected, got):
        for a, b in zip(want, have):
            assert torch.equal(a, b if isinstance(b, torch.Tensor) else torch.from_numpy(b))


def test_calls_on_a_busy_machine_keep_the_one_thread_bits(two_threads):
    """With both cores held by other processes, calls wait at the barrier and back off to the caller alone: the
    bits are the same either way."""
    x, w, dy = _inputs(2)
    expected = _one_thread(x, w, dy)
    with contention.busy(2):
        for _ in range(50):
            for a, b in zip(expected, _fwd_bwd(x, w, dy)):
                assert torch.equal(a, b)

"""The CPU kernels' thread pool (``pool.h``): results do not depend on which thread ran a chunk, callers on
several Python threads at once share it safely, and a forked child (verify's workers) gets a pool of its own."""

import multiprocessing
import threading

import pytest
import torch

import tileport
from tileport.backends.registry import REGISTRY

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
            for _ in range(20):  # repeated, so calls overlap and some find the pool busy
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


def _child(queue):
    torch.set_num_threads(2)
    y, dx, dw = _fwd_bwd(*_inputs(1))
    queue.put([t.numpy() for t in (y, dx, dw)])  # by value: a tensor would be shared by a file descriptor


def test_a_forked_child_runs_two_threads_with_a_pool_of_its_own(two_threads):
    x, w, dy = _inputs(1)
    _fwd_bwd(x, w, dy)  # the parent's pool exists (its workers are not in the child)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue,))
    child.start()
    got = queue.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    for a, b in zip(_one_thread(x, w, dy), got):
        assert torch.equal(a, b if isinstance(b, torch.Tensor) else torch.from_numpy(b))

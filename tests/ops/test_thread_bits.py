"""Every operator's results on the TileLang CPU backend have the same bits at one thread and at two: its row
work and its reductions over rows (a weight's gradient) are partitioned the same way whatever the thread count.
Written once for every spec (it was four copies, one per norm)."""

import pytest
import torch

from tileport.cases import case_at, load_suite, make_inputs
from tileport.ops.catalog import get, kernel_specs


def _inputs(spec, gen):
    if spec.general:  # declared by named dimensions: its suite's first fixed sizes, drawn by its value rules
        suite = load_suite(spec.name)
        inputs = make_inputs(suite, case_at(suite, suite.fixed[0], torch.float32))
    else:
        inputs = spec.example((3000, 700), torch.float32, "cpu", gen)
    if spec.backward is None:
        return inputs, False
    if "dy" in spec.backward.tensors:
        inputs["dy"] = torch.randn(inputs[spec.inputs[0].name].shape, generator=gen)
    else:  # a gradient per output it takes by name (d<output>), in the forward's shapes
        outs = spec.run(inputs, "tilelang", False)
        inputs |= {f"d{n}": torch.randn(t.shape, generator=gen).to(t.dtype) for n, t in outs.items()
                   if f"d{n}" in spec.backward.tensors and isinstance(t, torch.Tensor)}  # fmt: skip
    return inputs, True


@pytest.mark.parametrize("op", sorted(kernel_specs()))
def test_results_have_the_same_bits_for_any_thread_count(op):
    spec = get(op)
    inputs, backward = _inputs(spec, torch.Generator().manual_seed(0))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = spec.run(inputs, "tilelang", backward)
        torch.set_num_threads(2)
        two = spec.run(inputs, "tilelang", backward)
    finally:
        torch.set_num_threads(before)
    assert one.keys() == two.keys()
    for name in one:
        a, b = one[name], two[name]
        assert (a is None and b is None) or torch.equal(a, b), f"{op}: {name} differs between 1 and 2 threads"

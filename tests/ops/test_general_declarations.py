"""The interface generated for declarations rope does not exercise: a variadic batch and a concatenated last
dimension (``x: [*batch, 2*F]`` -> ``y: [*batch, F]``, silu_and_mul's shape), a scalar output, an integer input
with a value range, an empty call answered without the kernel. A toy operator served by a kernel module built
in the test."""

import dataclasses
import sys
import types

import pytest
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import interface
from tileport.ops import spec as s
from tileport.ops.interface import DeclarationError, derive

CALLS = []


def _forward(x, idx, scale):
    CALLS.append(tuple(x.shape))
    f = x.shape[-1] // 2
    y = torch.nn.functional.silu(x[..., :f]) * x[..., f:] * scale
    picked = y.reshape(-1, f)[:, idx].sum() if idx is not None else y.sum()
    return y, picked


def _backward(dy, dpicked, x, idx, scale):
    """d(silu(a) * b * scale) with dpicked spread over the picked columns (every column without idx)."""
    f = x.shape[-1] // 2
    a, b = x[..., :f], x[..., f:]
    g = dy.clone()
    if idx is None:
        g += dpicked
    else:
        g.reshape(-1, f)[:, idx] += dpicked
    sig = torch.sigmoid(a)
    da = g * scale * b * sig * (1 + a * (1 - sig))
    return torch.cat((da, g * scale * a * sig), -1)


def _toy(**changes):
    base = dict(
        name="toy_glu",
        summary="a toy",
        math="silu(a) * b * scale",
        inputs=("x: [*batch, 2*F] float grad", "idx: [K] index optional in [0, F)"),
        attrs=(s.Attr("scale", 1.0, "finite", s.REAL),),
        outputs=("y: [*batch, F] like:x", "picked: [] like:x"),
        grads=("dx: [*batch, 2*F] like:x",),
        backward=s.Backward(("dy", "dpicked", "x", "idx"), ("scale",)),
        composite=lambda x, idx=None, scale=1.0: _forward(x, idx, scale),
        example=None,
        bytes_moved=None,
        kernels={"torch": "toy_glu_kernels"},
        dtypes=(torch.float32,),
    )
    return s.OpSpec(**(base | changes))


@pytest.fixture
def toy(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEPORT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(interface, "_DERIVED", dict(interface._DERIVED))
    monkeypatch.setattr(REGISTRY, "plugin", dict(REGISTRY.plugin))
    monkeypatch.setattr(REGISTRY, "memo", {})
    module = types.ModuleType("toy_glu_kernels")
    module.forward, module.backward = _forward, _backward
    monkeypatch.setitem(sys.modules, "toy_glu_kernels", module)
    CALLS.clear()
    return derive(_toy())


def test_variadic_batch_and_a_concatenated_dimension(toy):
    x = torch.randn(2, 3, 8, requires_grad=True)
    y, picked = toy.function(x, None, scale=2.0)
    assert y.shape == (2, 3, 4) and picked.shape == ()
    ref = torch.nn.functional.silu(x[..., :4]) * x[..., 4:] * 2.0
    torch.testing.assert_close(y, ref)
    (y.sum() + picked).backward()
    xr = x.detach().clone().requires_grad_()
    r = torch.nn.functional.silu(xr[..., :4]) * xr[..., 4:] * 2.0
    (r.sum() + r.sum()).backward()
    torch.testing.assert_close(x.grad, xr.grad)
    assert toy.forward(torch.randn(8), None)[0].shape == (4,)  # an empty batch run: a 1-d x


def test_checks_of_a_multiple_a_range_and_the_rank(toy):
    with pytest.raises(ValueError, match=r"^x has 2\*F = 7 \(its dim 1\), which is not a multiple of 2$"):
        toy.forward(torch.randn(3, 7), None)
    with pytest.raises(ValueError, match=r"^x must have at least 1 dimension \(\[\*batch, 2\*F\]\), got 0"):
        toy.forward(torch.tensor(1.0), None)
    with pytest.raises(IndexError, match=r"^idx\[1\] = 4 is outside \[0, F\) = \[0, 4\)$"):
        toy.forward(torch.randn(3, 8), torch.tensor([0, 4]))
    with pytest.raises(TypeError, match=r"^idx must have an integer dtype \(int64 or int32\), got torch.float32$"):
        toy.forward(torch.randn(3, 8), torch.tensor([0.0]))
    with pytest.raises(
        ValueError, match=r"^x has 2\*F = 8 \(its dim 1\) but dy has F = 5 \(its dim 1\), so 2\*F = 10$"
    ):
        toy.backward(torch.randn(3, 5), torch.tensor(1.0), torch.randn(3, 8), None)


def test_every_result_empty_is_answered_without_the_kernel(toy):
    y, picked = toy.forward(torch.randn(0, 8), None)  # y empty, but the scalar has an element: the kernel's call
    assert y.shape == (0, 4) and picked.shape == () and float(picked) == 0.0 and CALLS == [(0, 8)]
    lone = derive(
        _toy(
            name="toy_glu_lone", outputs=("y: [*batch, F] like:x",), backward=s.Backward(("dy", "x", "idx"), ("scale",))
        )
    )
    assert lone.forward(torch.randn(0, 8), None).shape == (0, 4) and CALLS == [(0, 8)]  # every result empty: no call
    # the toy's kernel takes dpicked too: called with lone's three tensors it would raise a TypeError
    assert lone.backward(torch.randn(0, 4), torch.randn(0, 8), None, scale=1.0).shape == (0, 8)


def test_the_custom_ops_trace_the_declared_shapes(toy):
    x = torch.randn(2, 3, 8)
    torch.library.opcheck(torch.ops.tileport.toy_glu_fwd.default, (x, None, 1.5, None))
    y, picked = toy.forward(x, None)
    torch.library.opcheck(
        torch.ops.tileport.toy_glu_bwd.default, (torch.randn_like(y), torch.tensor(1.0), x, None, 1.5, None)
    )


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"inputs": ("idx: [K] index",)}, "the first input must be a required floating tensor"),
        ({"outputs": ("y: [*batch, F] like:x", "z: [G] like:x")}, "z .* has G, which no input has"),
        ({"backward": s.Backward(("dy", "nope"), ("scale",))}, "the backward names nope"),
        (
            {"outputs": ("y: [*batch, F] like:x optional",), "backward": s.Backward(("dy", "x"), ("scale",))},
            "y is optional, but no optional tensor alone binds",
        ),
    ],
)
def test_a_declaration_that_cannot_be_generated_is_refused_by_name(toy, changes, message):
    with pytest.raises((DeclarationError, ValueError), match=message):
        derive(dataclasses.replace(_toy(), name="toy_broken", **changes))

"""The declaration grammar's statistics dtype (``stat:OTHER``: float32 for 16-bit and float32 tensors, float64 for
float64) and the ``prob`` attribute kind: parsed, bound and checked by ``tileport.ops.dims``, resolved for
outputs and output gradients, and written into a generated interface (its checks, its outputs' dtypes, a
statistic the backward takes no gradient of marked non-differentiable)."""

import pytest
import torch

from tileport.ops import _checks, dims
from tileport.ops import spec as s
from tileport.ops.dims import decl

DECLS = ("x: [N, C] float grad", "t: [N] index in [0, C)")
OUTS = ("loss: [N] stat:x", "lse: [N] stat:x", "dloss: [N] like:loss")


def test_stat_parses_and_prints_back():
    t = decl("lse: [N] stat:x")
    assert (t.stat, t.like, t.related, str(t)) == ("x", None, "x", "lse: [N] stat:x")
    assert decl("y: [N] like:x").related == "x"
    with pytest.raises(ValueError, match=r"'stat:lse' must name another tensor, as in 'stat:x'"):
        decl("lse: [N] stat:lse")


def test_stat_names_a_declared_tensor_without_cycles():
    with pytest.raises(ValueError, match=r"^lse has the statistics dtype of q, which is not declared$"):
        dims.Declaration(DECLS, ("lse: [N] stat:q",))
    with pytest.raises(ValueError, match=r"^the dtypes go round"):
        dims.Declaration(("a: [N] stat:b", "b: [N] like:a"))


@pytest.mark.parametrize(
    "dtype, stat",
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
    ],
)
def test_binding_resolves_stat_outputs_and_their_gradients(dtype, stat):
    declaration = dims.Declaration(DECLS, OUTS)
    b = dims.bind(declaration, {"x": torch.zeros(3, 5, dtype=dtype), "t": torch.zeros(3, dtype=torch.long)})
    assert b.dtype("loss") == b.dtype("lse") == b.dtype("dloss") == stat
    outs = dims.fake_outputs(("loss", "lse"), b)
    assert [o.dtype for o in outs] == [stat, stat] and outs[0].shape == (3,)


def test_binding_checks_a_stat_tensor_against_its_tensor():
    declaration = dims.Declaration(("dloss: [N] stat:x", *DECLS, "lse: [N] stat:x"))
    x, t = torch.zeros(3, 5, dtype=torch.bfloat16), torch.zeros(3, dtype=torch.long)
    dims.bind(declaration, {"dloss": torch.zeros(3), "x": x, "t": t, "lse": torch.zeros(3)})
    with pytest.raises(
        TypeError, match=r"^lse must have the statistics dtype of x \(torch.float32\), got torch.float64$"
    ):
        dims.bind(declaration, {"dloss": torch.zeros(3), "x": x, "t": t, "lse": torch.zeros(3, dtype=torch.float64)})
    with pytest.raises(
        TypeError, match=r"^dloss must have the statistics dtype of x \(float32, float64\), got torch.bfloat16"
    ):
        dims.bind(declaration, {"dloss": torch.zeros(3, dtype=torch.bfloat16), "x": x, "t": t, "lse": torch.zeros(3)})
    with pytest.raises(
        TypeError, match=r"^dloss must have the statistics dtype of x \(torch.float64\), got torch.float32$"
    ):
        dims.bind(declaration, {"dloss": torch.zeros(3), "x": x.double(), "t": t, "lse": torch.zeros(3).double()})


def test_prob_attribute_kind():
    assert _checks.probability(0.25, "eps") == 0.25 and _checks.probability(1, "eps") == 1.0
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"^label_smoothing must be in \[0, 1\], got"):
            _checks.probability(bad, "label_smoothing")
    with pytest.raises(TypeError, match=r"^label_smoothing must be a real number, got bool$"):
        _checks.probability(True, "label_smoothing")
    assert s.PROB == "prob"


def _stat_spec():
    """An operator with statistics outputs, one of them (lse) kept for its backward without a gradient."""
    return s.OpSpec(
        name="stat_probe",
        summary="",
        math="",
        composite=lambda **k: None,
        example=None,
        bytes_moved=None,
        inputs=("x: [N, C] float grad",),
        attrs=(s.Attr("eps", 0.0, "[0, 1]", s.PROB),),
        outputs=("loss: [N] stat:x", "lse: [N] stat:x"),
        grads=("dx: [N, C] like:x",),
        backward=s.Backward(("dloss", "x", "lse"), ("eps",)),
    )


def test_generated_interface_writes_stat_dtypes_and_checks():
    from tileport.ops.interface import files

    text = files.text(_stat_spec())
    stat = "(torch.float64 if x.dtype == torch.float64 else torch.float32)"
    assert f"dloss.dtype == {stat}" in text and f"lse.dtype == {stat}" in text  # the backward's checks
    assert "_rt.stat_dtype(x.dtype), _rt.stat_dtype(x.dtype)" in text  # the outputs' dtypes (empty, fake)
    assert "ctx.mark_non_differentiable(lse)" in text and "mark_non_differentiable(loss" not in text
    assert "eps = _c.probability(eps, 'eps')" in text

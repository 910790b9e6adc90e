"""Operators declared by named dimensions (issue 38, its first part): each tensor's shape over named dimensions,
its dtype class, whether it is differentiable or optional, an integer tensor's value range, and constraints
between dimensions; bound to the tensors of a call, that one declaration gives the checks (each dimension bound
once and checked everywhere it appears), the outputs' shapes, the fake implementations' outputs and the
gradients' declarations.

    from tileport.ops import dims

    ROPE = dims.Declaration(
        ("q: [B, T, Hq, D] float grad", "k: [B, T, Hk, D] like:q grad", "cos: [T, R/2] like:q", "sin: [T, R/2] like:q"),
        outputs=("q_out: [B, T, Hq, D] like:q", "k_out: [B, T, Hk, D] like:k"),
        where=("R <= D", "R % 2 == 0", "Hq % Hk == 0"),
    )
    b = dims.bind(ROPE, {"q": q, "k": k, "cos": cos, "sin": sin})
    b.shape_of("q"), b.size("R")

    CROSS_ENTROPY = dims.Declaration(
        ("input: [N, C] float grad", "target: [N] index in [0, C) or ignore_index"),
        outputs=("loss: [N] stat:input", "logits: [N, C] like:input"),
        attrs=("ignore_index",),
    )
    b = dims.bind(CROSS_ENTROPY, {"input": x, "target": t}, {"ignore_index": -100})
    b.check_values()                      # IndexError for a target outside [0, C) that is not ignore_index
    dims.fake_outputs(["loss"], b)        # (torch.empty(N),) in input's statistics dtype (fp32; fp64 for fp64)

The grammar of a shape is in ``shape``, of a one-line declaration in ``decl``, of a constraint in
``constraint``; the row-wise roles of ``tileport.ops.spec`` are short forms of these (``spec.from_role``).
An operator declared this way (``OpSpec.general``) has its interface generated from the declaration
(``tileport.ops.interface``), its checks written out as straight-line code whose messages are ``bind``'s.
"""

from .bind import Binding, Origin, bind, bind_sizes
from .constraint import Constraint, constraint
from .decl import CLASSES, TensorDecl, decl
from .declaration import Declaration, as_declaration
from .outputs import fake_outputs, gradient_of, schema_type
from .shape import Dim, Shape, parse_shape

__all__ = [
    "CLASSES",
    "Binding",
    "Constraint",
    "Declaration",
    "Dim",
    "Origin",
    "Shape",
    "TensorDecl",
    "as_declaration",
    "bind",
    "bind_sizes",
    "constraint",
    "decl",
    "fake_outputs",
    "gradient_of",
    "parse_shape",
    "schema_type",
]

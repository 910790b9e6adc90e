"""Operators declared by named dimensions (``tileport.ops.dims``, issue 38 part 1): the shape grammar and the
one-line declarations parse and print back, malformed ones are refused by name; binding checks each dimension
everywhere it appears (RoPE with GQA, a concatenated input, cross-entropy), dtype classes, one device and the
constraints, with exact messages; a binding gives outputs' shapes, fake outputs and value-range checks; the
row-wise roles' short forms accept and reject what today's checks do."""

import re

import pytest
import torch

from tileport.ops import _checks, catalog, dims
from tileport.ops import spec as s
from tileport.ops.dims import Declaration, Dim, bind, bind_sizes, decl, parse_shape

# ---------------------------------------------------------------- the shape grammar


@pytest.mark.parametrize(
    "text", ["[*batch, T, H, D]", "[T, R/2]", "[*, 2*F]", "[]", "[D]", "[N, C, *rest]", "[2, D]", "[*]", "[N, N]"]
)
def test_shape_round_trips(text):
    assert str(parse_shape(text)) == text


def test_shape_is_canonical_whatever_the_spacing():
    assert str(parse_shape("  [ *batch ,T,  2 * F , R / 2 ] ")) == "[*batch, T, 2*F, R/2]"


def test_shape_items():
    shape = parse_shape("[N, *rest, 2*F, R/2, 3]")
    assert shape.items == (Dim("N"), Dim("rest", variadic=True), Dim("F", mul=2), Dim("R", div=2), Dim("", value=3))
    assert (shape.variadic, shape.fixed) == (1, 4)
    assert shape.names() == ("N", "*rest", "F", "R")
    assert parse_shape("[]").items == () and parse_shape("[T, D]").variadic is None
    assert parse_shape("[*]").names() == ("*",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("T, D", "malformed shape 'T, D': it must be written in brackets, as in '[*batch, T, D]'"),
        ("[T,,D]", "malformed shape '[T,,D]': item 2 (column 3) is empty"),
        ("[T, ]", "malformed shape '[T, ]': item 2 (column 4) is empty"),
        (
            "[T, R/]",
            (
                "malformed shape '[T, R/]': item 2 (column 4) 'R/' is not a dimension "
                "(NAME, k*NAME, NAME/k, an int, *NAME or *)"
            ),
        ),
        (
            "[2.5]",
            (
                "malformed shape '[2.5]': item 1 (column 1) '2.5' is not a dimension "
                "(NAME, k*NAME, NAME/k, an int, *NAME or *)"
            ),
        ),
        (
            "[F*2]",
            (
                "malformed shape '[F*2]': item 1 (column 1) 'F*2' is not a dimension "
                "(NAME, k*NAME, NAME/k, an int, *NAME or *)"
            ),
        ),
        ("[0*F]", "malformed shape '[0*F]': item 1 (column 1) '0*F': the factor must be a positive int, got 0"),
        ("[R/0]", "malformed shape '[R/0]': item 1 (column 1) 'R/0': the factor must be a positive int, got 0"),
        ("[*a, T, *]", "malformed shape '[*a, T, *]': 2 variadic items (*a, *); at most one"),
    ],
)
def test_malformed_shapes_are_refused_by_name(text, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_shape(text)


def test_a_shape_must_be_text():
    with pytest.raises(TypeError, match=r"^a shape must be a string such as '\[\*, D\]', got tuple$"):
        parse_shape((4, 8))


# ---------------------------------------------------------------- one-line declarations


@pytest.mark.parametrize(
    "text",
    [
        "x: [*batch, T, H, D] float grad",
        "cos: [T, R/2] like:x",
        "weight: [D] like:x grad optional",
        "target: [*batch] index in [0, C) or ignore_index",
        "mask: [N] bool optional",
        "labels: [N] int32 in [-1, 10) or -1, pad",
        "loss: [] float",
    ],
)
def test_declaration_round_trips(text):
    assert str(decl(text)) == text


def test_declaration_fields():
    t = decl("target: [*batch] index optional in [0, C) or ignore_index, -1")
    assert (t.name, str(t.shape), t.dtype, t.grad, t.optional) == ("target", "[*batch]", "index", False, True)
    assert (t.low, t.high, t.allow, t.ranged) == (0, "C", ("ignore_index", -1), True)
    assert decl("loss: []").dtype == "float"  # the default class
    assert decl("cos: [T, R/2] like:x").like == "x"
    assert decl("x: [*, D] float grad") == dims.TensorDecl("x", "[*, D]", grad=True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x [*, D]", "malformed declaration 'x [*, D]': expected 'NAME: [SHAPE] ...', as in 'x: [*, D] float grad'"),
        (
            "x: [*, D] floot",
            ("malformed declaration 'x: [*, D] floot': unknown word 'floot' (a dtype class, grad, optional, in)"),
        ),
        (
            "t: [N] index grad",
            ("malformed declaration 't: [N] index grad': t: a index tensor cannot be differentiable (grad)"),
        ),
        (
            "t: [N] float in [0, C)",
            (
                "malformed declaration 't: [N] float in [0, C)': t: only integer tensors "
                "(int64, int32, index) have a value range, not float"
            ),
        ),
        (
            "t: [N] index in [0, C]",
            (
                "malformed declaration 't: [N] index in [0, C]': a range is written "
                "'in [LOW, HIGH)' or 'in [LOW, HIGH) or A, B'"
            ),
        ),
        (
            "cos: [T] like:cos",
            ("malformed declaration 'cos: [T] like:cos': cos: 'like:cos' must name another tensor, as in 'like:x'"),
        ),
        ("1x: [T]", "malformed declaration '1x: [T]': a tensor's name must be an identifier, got '1x'"),
        ("x: [T,,D]", "malformed declaration 'x: [T,,D]': malformed shape '[T,,D]': item 2 (column 3) is empty"),
    ],
)
def test_malformed_declarations_are_refused_by_name(text, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        decl(text)


def test_tensor_decl_checks_its_fields():
    with pytest.raises(ValueError, match=r"^t: a value range needs both bounds, got low=0, high=None$"):
        dims.TensorDecl("t", "[N]", "index", low=0)
    with pytest.raises(ValueError, match=r"^t: allowed values \(-1,\) need a value range to be exempt from$"):
        dims.TensorDecl("t", "[N]", "index", allow=(-1,))
    with pytest.raises(
        ValueError,
        match=r"^x: unknown dtype class 'half' \(one of float, int64, int32, index, "
        r"bool, like:OTHER, stat:OTHER\)$",
    ):
        dims.TensorDecl("x", "[D]", "half")
    with pytest.raises(TypeError, match=r"^a declaration must be a string such as 'x: \[\*, D\] float grad', got int$"):
        decl(3)


# ---------------------------------------------------------------- constraints


def test_constraints_evaluate_over_sizes():
    assert dims.constraint("R <= D").holds({"R": 64, "D": 64})
    assert not dims.constraint("R <= D").holds({"R": 96, "D": 64})
    assert dims.constraint("0 < R <= D").names == ("R", "D")
    assert not dims.constraint("0 < R <= D").holds({"R": 0, "D": 64})
    assert dims.constraint("R % 2 == 0").holds({"R": 32})
    assert dims.constraint("Hq // Hk * Hk == Hq").holds({"Hq": 8, "Hk": 2})
    assert dims.constraint("-F + 2 * F != F + 1").holds({"F": 3})
    assert str(dims.constraint("  R <= D ")) == "R <= D"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "R ** 2 < D",
            ("malformed constraint 'R ** 2 < D': R ** 2 is not allowed (names, ints, + - * / // %, comparisons)"),
        ),
        (
            "__import__('os').system('true') == 0",
            (
                "malformed constraint \"__import__('os').system('true') == 0\": "
                "__import__('os').system('true') is not allowed (names, ints, + - * / // %, comparisons)"
            ),
        ),
        ("R <= 2.5", "malformed constraint 'R <= 2.5': 2.5 is not allowed (names, ints, + - * / // %, comparisons)"),
        ("R in D", "malformed constraint 'R in D': 'in' is not allowed (names, ints, + - * / // %, comparisons)"),
        (
            "R is not D",
            "malformed constraint 'R is not D': 'is not' is not allowed (names, ints, + - * / // %, comparisons)",
        ),
        ("R", "malformed constraint 'R': it must be a comparison (<, <=, >, >=, ==, !=)"),
        ("R < D and D < 9", "malformed constraint 'R < D and D < 9': it must be a comparison (<, <=, >, >=, ==, !=)"),
        ("R <=", "malformed constraint 'R <=': invalid syntax"),
    ],
)
def test_malformed_constraints_are_refused(text, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        dims.constraint(text)


def test_a_constraint_dividing_by_zero_says_so():
    with pytest.raises(ValueError, match=r"^the constraint Hq % Hk == 0 divides by zero with Hq = 8, Hk = 0$"):
        dims.constraint("Hq % Hk == 0").holds({"Hq": 8, "Hk": 0})


# ---------------------------------------------------------------- declarations as a whole


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"inputs": ("x: [D]", "x: [D]")}, "tensors declared twice: x"),
        ({"inputs": ("cos: [T] like:x",)}, "cos has the dtype of x, which is not declared"),
        ({"inputs": ("a: [D] like:b", "b: [D] like:a")}, "the dtypes go round: a like b like a"),
        ({"inputs": ("x: [*B, D]", "y: [B]")}, "B is a variadic dimension in x but a single one in y"),
        ({"inputs": ("x: [C]",), "attrs": ("C",)}, "C named both a dimension and an attribute"),
        (
            {"inputs": ("t: [N] index in [0, K)",)},
            "t's value range reads K, which is neither a dimension nor an attribute",
        ),
        ({"inputs": ("t: [N] index in [0, N) or pad",)}, "t's allowed value pad is not an attribute (attrs: none)"),
        (
            {"inputs": ("x: [*B, D]",), "where": ("B < D",)},
            "the constraint B < D reads B, which is a variadic run, not a size",
        ),
        (
            {"inputs": ("x: [D]",), "where": ("R <= D",)},
            "the constraint R <= D reads R, which is neither a dimension nor an attribute",
        ),
        (
            {"inputs": ("x: [*, D]",), "outputs": ("y: [*, F]",)},
            "y [*, F] has F, which no input has: its size cannot be derived",
        ),
    ],
)
def test_inconsistent_declarations_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Declaration(**kwargs)


def test_declaration_lists_its_dimensions_and_tensors():
    d = Declaration(("x: [*batch, T, H, D]", "cos: [T, R/2]"), outputs=("rstd: [*batch]",))
    assert d.dims() == ("*batch", "T", "H", "D", "R")
    assert [t.name for t in d.tensors] == ["x", "cos", "rstd"] and "rstd" in d and "y" not in d
    with pytest.raises(KeyError, match="no tensor named 'y' is declared \\(declared: x, cos, rstd\\)"):
        d["y"]
    assert d.plus([d["x"]]) is d  # already declared: nothing added
    assert [t.name for t in d.plus(["drstd: [*batch] like:rstd"]).outputs] == ["rstd", "drstd"]


# ---------------------------------------------------------------- binding: RoPE with GQA

ROPE = Declaration(
    ("q: [B, T, Hq, D] float grad", "k: [B, T, Hk, D] like:q grad", "cos: [T, R/2] like:q", "sin: [T, R/2] like:q"),
    outputs=("q_out: [B, T, Hq, D] like:q", "k_out: [B, T, Hk, D] like:k"),
    where=("R <= D", "R % 2 == 0", "Hq % Hk == 0"),
)


def _rope(B=2, T=16, Hq=8, Hk=2, D=64, R=64, **changed):
    tensors = {
        "q": torch.randn(B, T, Hq, D),
        "k": torch.randn(B, T, Hk, D),
        "cos": torch.randn(T, R // 2),
        "sin": torch.randn(T, R // 2),
    }
    return tensors | changed


def test_rope_binds_each_dimension_once():
    b = bind(ROPE, _rope(R=32))
    assert b.sizes == {"B": 2, "T": 16, "Hq": 8, "D": 64, "Hk": 2, "R": 32}
    assert b.shape_of("q_out") == (2, 16, 8, 64) and b.shape_of(ROPE["k_out"]) == (2, 16, 2, 64)
    assert b.origins["R"] == dims.Origin("cos", "R/2", 16, (1, 1))
    assert (b.dtype("k_out"), b.device, b.size("R")) == (torch.float32, torch.device("cpu"), 32)


@pytest.mark.parametrize(
    ("changed", "error", "message"),
    [
        ({"cos": torch.randn(15, 32)}, ValueError, "cos has T = 15 (its dim 0) but q has T = 16 (its dim 1)"),
        ({"k": torch.randn(2, 16, 2, 32)}, ValueError, "k has D = 32 (its dim 3) but q has D = 64 (its dim 3)"),
        ({"sin": torch.randn(16, 30)}, ValueError, "sin has R/2 = 30 (its dim 1) but cos has R/2 = 32 (its dim 1)"),
        (
            {"cos": torch.randn(16, 40), "sin": torch.randn(16, 40)},
            ValueError,
            "the sizes must satisfy R <= D, got R = 80, D = 64",
        ),
        ({"k": torch.randn(2, 16, 3, 64)}, ValueError, "the sizes must satisfy Hq % Hk == 0, got Hq = 8, Hk = 3"),
        (
            {"q": torch.randn(16, 8, 64)},
            ValueError,
            "q must have 4 dimensions ([B, T, Hq, D]), got 3 (shape (16, 8, 64))",
        ),
        (
            {"cos": torch.randn(16, 32).half()},
            TypeError,
            "cos must have the dtype of q (torch.float32), got torch.float16",
        ),
        (
            {"q": torch.randn(2, 16, 8, 64).double()},
            TypeError,
            "k must have the dtype of q (torch.float64), got torch.float32",
        ),
        (
            {"q": torch.zeros(2, 16, 8, 64, dtype=torch.int64)},
            TypeError,
            "q must have a floating dtype (float16, bfloat16, float32, float64), got torch.int64",
        ),
        ({"sin": None}, TypeError, "sin must be a torch.Tensor, got NoneType"),
        ({"sin": [[0.0]]}, TypeError, "sin must be a torch.Tensor, got list"),
        (
            {"cos": torch.randn(16, 32, device="meta")},
            ValueError,
            "cos must be on q's device cpu, got meta (tensors must be on one device)",
        ),
        ({"v": torch.randn(2)}, ValueError, "no tensor named 'v' is declared (declared: q, k, cos, sin, q_out, k_out)"),
    ],
)
def test_rope_mismatches_name_the_tensor_the_dimension_and_both_sizes(changed, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        bind(ROPE, _rope(**changed))


def test_a_given_output_is_checked_against_the_inputs():
    b = bind(ROPE, _rope() | {"q_out": torch.empty(2, 16, 8, 64)})
    assert "q_out" in b.tensors
    with pytest.raises(ValueError, match=r"^q_out has Hq = 4 \(its dim 2\) but q has Hq = 8 \(its dim 2\)$"):
        bind(ROPE, _rope() | {"q_out": torch.empty(2, 16, 4, 64)})


def test_a_constraint_over_an_absent_optional_tensor_is_skipped():
    d = Declaration(("x: [T, D]", "cos: [T, R/2] optional"), where=("R <= D",))
    assert bind(d, {"x": torch.randn(4, 8), "cos": None}).sizes == {"T": 4, "D": 8}
    assert bind(d, {"x": torch.randn(4, 8)}).sizes == {"T": 4, "D": 8}
    with pytest.raises(ValueError, match=r"^the sizes must satisfy R <= D, got R = 10, D = 8$"):
        bind(d, {"x": torch.randn(4, 8), "cos": torch.randn(4, 5)})
    with pytest.raises(TypeError, match=r"^cos must be None or a torch.Tensor, got int$"):
        bind(d, {"x": torch.randn(4, 8), "cos": 3})


def test_constraints_read_attributes():
    d = Declaration(("x: [N, H]",), where=("H % heads == 0",), attrs=("heads",))
    assert bind(d, {"x": torch.randn(2, 8)}, {"heads": 4}).size("H") == 8
    with pytest.raises(ValueError, match=r"^the sizes must satisfy H % heads == 0, got H = 8, heads = 3$"):
        bind(d, {"x": torch.randn(2, 8)}, {"heads": 3})
    with pytest.raises(
        TypeError,
        match=r"^the constraint H % heads == 0 reads the attribute heads, which must be an "
        r"int, got float$",
    ):
        bind(d, {"x": torch.randn(2, 8)}, {"heads": 4.0})


# ---------------------------------------------------------------- multiples, fractions, literals, repeats

GLU = Declaration(("h: [*, 2*F] float grad",), outputs=("y: [*, F] like:h",))


def test_a_concatenated_input_gives_its_half_as_output():
    b = bind(GLU, {"h": torch.randn(3, 5, 8)})
    assert (b.size("F"), b.size("*"), b.shape_of("y")) == (4, (3, 5), (3, 5, 4))
    assert b.shape_of("[*, 2*F, 3]") == (3, 5, 8, 3)
    assert bind(GLU, {"h": torch.randn(0)}).shape_of("y") == (0,)  # rank 1: the run is empty, F = 0


def test_a_multiple_that_does_not_divide_is_named():
    with pytest.raises(ValueError, match=r"^h has 2\*F = 7 \(its dim 1\), which is not a multiple of 2$"):
        bind(GLU, {"h": torch.randn(3, 7)})
    with pytest.raises(ValueError, match=r"^y has F = 5 \(its dim 1\) but h has 2\*F = 8 \(its dim 1\), so F = 4$"):
        bind(GLU, {"h": torch.randn(3, 8), "y": torch.empty(3, 5)})


def test_a_fraction_of_a_dimension_bound_earlier():
    d = Declaration(("x: [R]", "cos: [R/2]"))
    assert bind(d, {"x": torch.randn(64), "cos": torch.randn(32)}).size("R") == 64
    with pytest.raises(
        ValueError, match=r"^cos has R/2 = 31 \(its dim 0\) but x has R = 63 \(its dim 0\), so R/2 = 31.5$"
    ):
        bind(d, {"x": torch.randn(63), "cos": torch.randn(31)})
    with pytest.raises(
        ValueError, match=r"^cos has R/2 = 16 \(its dim 0\) but x has R = 64 \(its dim 0\), so R/2 = 32$"
    ):
        bind(d, {"x": torch.randn(64), "cos": torch.randn(16)})


def test_literal_sizes_and_repeated_names():
    d = Declaration(("w: [2, D]", "a: [N, N]"))
    assert bind(d, {"w": torch.randn(2, 5), "a": torch.randn(3, 3)}).sizes == {"D": 5, "N": 3}
    with pytest.raises(ValueError, match=r"^w must have size 2 in its dim 0 \(\[2, D\]\), got 3$"):
        bind(d, {"w": torch.randn(3, 5), "a": torch.randn(3, 3)})
    with pytest.raises(ValueError, match=r"^a has N = 4 \(its dim 1\) but a has N = 3 \(its dim 0\)$"):
        bind(d, {"w": torch.randn(2, 5), "a": torch.randn(3, 4)})


# ---------------------------------------------------------------- variadic runs and 0-d tensors

NORM = Declaration(
    ("x: [*batch, D] float grad", "weight: [D] like:x grad optional"),
    outputs=("y: [*batch, D] like:x", "rstd: [*batch] float"),
)


def test_a_variadic_run_of_rank_zero():
    b = bind(NORM, {"x": torch.randn(8)})
    assert b.size("*batch") == () and b.shape_of("rstd") == () and b.numel("rstd") == 1
    assert not b.empty("rstd") and b.shape_of("y") == (8,)
    assert bind(Declaration(("t: [*rest]",)), {"t": torch.tensor(1.0)}).size("*rest") == ()


def test_a_variadic_run_in_the_middle():
    b = bind(Declaration(("x: [N, *rest, C]", "w: [*rest]")), {"x": torch.randn(2, 3, 4, 5), "w": torch.randn(3, 4)})
    assert b.sizes == {"N": 2, "*rest": (3, 4), "C": 5}
    with pytest.raises(
        ValueError, match=r"^w has \*rest = \(4,\) \(its dim 0\) but x has \*rest = \(3, 4\) \(its dims 1-2\)$"
    ):
        bind(Declaration(("x: [N, *rest, C]", "w: [*rest]")), {"x": torch.randn(2, 3, 4, 5), "w": torch.randn(4)})


def test_a_variadic_run_must_match_exactly_where_it_recurs():
    b = bind(NORM, {"x": torch.randn(2, 3, 8)})
    with pytest.raises(
        ValueError, match=r"^rstd has \*batch = \(6,\) \(its dim 0\) but x has \*batch = \(2, 3\) \(its dims 0-1\)$"
    ):
        b.bind({"rstd": torch.randn(6)})
    with pytest.raises(
        ValueError, match=r"^rstd has \*batch = \(\) \(no dims\) but x has \*batch = \(2, 3\) \(its dims 0-1\)$"
    ):
        b.bind({"rstd": torch.tensor(0.0)})
    with pytest.raises(
        ValueError, match=r"^x must have at least 1 dimension \(\[\*batch, D\]\), got 0 \(shape \(\)\)$"
    ):
        bind(NORM, {"x": torch.tensor(1.0)})


def test_zero_dimensional_tensors():
    d = Declaration(("loss: []",), outputs=("dloss: [] like:loss",))
    b = bind(d, {"loss": torch.tensor(2.0)})
    assert b.shape_of("dloss") == () and b.numel("loss") == 1 and b.sizes == {}
    with pytest.raises(ValueError, match=r"^loss must have 0 dimensions \(\[\]\), got 1 \(shape \(3,\)\)$"):
        bind(d, {"loss": torch.randn(3)})


def test_empty_tensors():
    b = bind(NORM, {"x": torch.randn(0, 8), "weight": torch.randn(8)})
    assert b.empty("x") and b.empty("rstd") and b.shape_of("rstd") == (0,) and not b.empty("weight")
    assert bind(NORM, {"x": torch.randn(4, 0)}).empty("y")


def test_unbound_dimensions_and_sizes_are_named():
    b = bind(NORM, {"x": torch.randn(4, 8)})
    with pytest.raises(ValueError, match=r"^E is not bound \(bound: \*batch, D\)$"):
        b.size("E")
    with pytest.raises(ValueError, match=r"^the shape \[\*, E\] reads \*, which no given tensor binds$"):
        b.shape_of("[*, E]")
    with pytest.raises(ValueError, match=r"^the shape \[D/3\] has D/3 = 2.6666666666666665, not a whole size$"):
        b.shape_of("[D/3]")


# ---------------------------------------------------------------- dtype classes

INTS = Declaration(("a: [N] int64", "b: [N] int32", "c: [N] index", "m: [N] bool"))


def _ints(**changed):
    n = 3
    base = {
        "a": torch.zeros(n, dtype=torch.int64),
        "b": torch.zeros(n, dtype=torch.int32),
        "c": torch.zeros(n, dtype=torch.int32),
        "m": torch.zeros(n, dtype=torch.bool),
    }
    return base | changed


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({"a": torch.zeros(3, dtype=torch.int32)}, "a must have dtype torch.int64, got torch.int32"),
        ({"b": torch.zeros(3, dtype=torch.int64)}, "b must have dtype torch.int32, got torch.int64"),
        ({"c": torch.zeros(3)}, "c must have an integer dtype (int64 or int32), got torch.float32"),
        ({"c": torch.zeros(3, dtype=torch.int16)}, "c must have an integer dtype (int64 or int32), got torch.int16"),
        ({"m": torch.zeros(3, dtype=torch.uint8)}, "m must have dtype torch.bool, got torch.uint8"),
    ],
)
def test_dtype_classes(changed, message):
    assert bind(INTS, _ints()).dtypes["c"] == torch.int32
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        bind(INTS, _ints(**changed))


def test_dtypes_of_outputs():
    d = Declaration(("x: [N] float", "t: [N] index"), outputs=("y: [N] like:x", "i: [N] index", "s: [N] float"))
    b = bind(d, {"x": torch.randn(3).half(), "t": torch.zeros(3, dtype=torch.int32)})
    assert (b.dtype("y"), b.dtype("i"), b.dtype("s", {"s": torch.float32})) == (
        torch.float16,
        torch.int64,
        torch.float32,
    )
    with pytest.raises(ValueError, match=r"^the dtype of s \(float\) is not fixed by its declaration: give it$"):
        b.dtype("s")


# ---------------------------------------------------------------- cross-entropy: ranges and fake outputs

CROSS_ENTROPY = Declaration(
    ("input: [N, C] float grad", "target: [N] index in [0, C) or ignore_index"),
    outputs=("loss: [] like:input", "losses: [N] like:input"),
    attrs=("ignore_index",),
)


def _ce(target, C=10):
    return bind(
        CROSS_ENTROPY, {"input": torch.randn(len(target), C), "target": torch.tensor(target)}, {"ignore_index": -100}
    )


def test_cross_entropy_shapes_and_fake_outputs():
    b = _ce([1, -100, 9, 0])
    b.check_values()  # in range or ignored
    loss, losses = dims.fake_outputs(["loss", CROSS_ENTROPY["losses"]], b)
    assert (loss.shape, losses.shape, loss.dtype, loss.device) == ((), (4,), torch.float32, torch.device("cpu"))
    (on_meta,) = dims.fake_outputs(["losses"], b, {"losses": torch.float64}, device="meta")
    assert (on_meta.shape, on_meta.dtype, on_meta.device.type) == ((4,), torch.float64, "meta")
    with pytest.raises(ValueError, match=r"^target has N = 3 \(its dim 0\) but input has N = 4 \(its dim 0\)$"):
        bind(CROSS_ENTROPY, {"input": torch.randn(4, 10), "target": torch.zeros(3, dtype=torch.int64)})


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ([1, -100, 12, 3], "target[2] = 12 is outside [0, C) = [0, 10) and is not ignore_index = -100"),
        ([10, 0], "target[0] = 10 is outside [0, C) = [0, 10) and is not ignore_index = -100"),
        ([0, -1], "target[1] = -1 is outside [0, C) = [0, 10) and is not ignore_index = -100"),
    ],
)
def test_a_target_outside_its_range_is_an_index_error(target, message):
    with pytest.raises(IndexError, match=f"^{re.escape(message)}$"):
        _ce(target).check_values()


def test_value_ranges_read_attributes_literals_and_positions():
    d = Declaration(("x: [N, C]", "t: [*b] index in [0, C) or pad, -1"), attrs=("pad",))
    t = torch.tensor([[0, -1], [7, 2]])
    with pytest.raises(IndexError, match=r"^t\[1, 0\] = 7 is outside \[0, C\) = \[0, 5\) and is none of pad = 99, -1$"):
        bind(d, {"x": torch.randn(2, 5), "t": t}, {"pad": 99}).check_values()
    bind(d, {"x": torch.randn(2, 5), "t": t}, {"pad": 7}).check_values()
    bind(d, {"x": torch.randn(2, 5), "t": t}, {"pad": 7}).check_values(names=["x"])  # t not asked
    without = Declaration(("x: [N, C]", "t: [*b] index in [0, C) or pad"), attrs=("pad",))
    with pytest.raises(IndexError, match=r"^t\[0, 1\] = -1 is outside \[0, C\) = \[0, 8\)$"):  # pad None: none exempt
        bind(without, {"x": torch.randn(2, 8), "t": t}, {"pad": None}).check_values()


def test_a_scalar_out_of_range_and_meta_tensors():
    d = Declaration(("t: [] int64 in [0, 4)",))
    with pytest.raises(IndexError, match=r"^t = 4 is outside \[0, 4\)$"):
        bind(d, {"t": torch.tensor(4)}).check_values()
    bind(d, {"t": torch.tensor(4, device="meta")}).check_values()  # no data to read


def test_a_range_reading_a_missing_or_wrong_attribute():
    d = Declaration(("t: [N] index in [0, classes)",), attrs=("classes",))
    with pytest.raises(
        ValueError, match=r"^t's value range reads classes, which no given tensor binds and no attribute gives$"
    ):
        bind(d, {"t": torch.zeros(2, dtype=torch.int64)}).check_values()
    with pytest.raises(
        TypeError, match=r"^t's value range reads the attribute classes, which must be an int, got float$"
    ):
        bind(d, {"t": torch.zeros(2, dtype=torch.int64)}, {"classes": 3.0}).check_values()


# ---------------------------------------------------------------- gradients, schema, sizes drawn by a generator


def test_dy_is_checked_in_its_outputs_own_shape():
    b = bind(NORM, {"x": torch.randn(2, 3, 8)})
    dy, drstd = dims.gradient_of(NORM["y"]), dims.gradient_of(NORM["rstd"], optional=True)
    assert str(drstd) == "drstd: [*batch] like:rstd optional"
    grads = b.bind({"dy": torch.randn(2, 3, 8), "drstd": torch.randn(2, 3)}, [dy, drstd])
    assert grads.shape_of("drstd") == (2, 3) and set(grads.tensors) == {"x", "dy", "drstd"}
    with pytest.raises(
        ValueError, match=r"^drstd has \*batch = \(2,\) \(its dim 0\) but x has \*batch = \(2, 3\) \(its dims 0-1\)$"
    ):
        b.bind({"drstd": torch.randn(2)}, [drstd])
    with pytest.raises(TypeError, match=r"^dy must have the dtype of y \(torch.float32\), got torch.float16$"):
        b.bind({"dy": torch.randn(2, 3, 8).half()}, [dy])  # y is not given: its dtype is x's (like:x)


def test_schema_types():
    assert [dims.schema_type(t) for t in NORM.inputs] == ["Tensor", "Tensor?"]


def test_fake_outputs_need_a_device():
    b = bind_sizes(NORM, {"*batch": (2,), "D": 4})
    with pytest.raises(
        ValueError, match=r"^no device to allocate the outputs on: no tensor was bound and none was given$"
    ):
        dims.fake_outputs(["y"], b)
    assert dims.fake_outputs(["y"], b, {"y": torch.float16}, "cpu")[0].shape == (2, 4)


def test_sizes_drawn_for_a_declaration():
    b = bind_sizes(ROPE, {"B": 1, "T": 4, "Hq": 4, "Hk": 2, "D": 8, "R": 8})
    assert [b.shape_of(t) for t in ROPE.inputs] == [(1, 4, 4, 8), (1, 4, 2, 8), (4, 4), (4, 4)]
    with pytest.raises(ValueError, match=r"^the sizes must satisfy R % 2 == 0, got R = 7$"):
        bind_sizes(ROPE, {"B": 1, "T": 4, "Hq": 4, "Hk": 2, "D": 8, "R": 7})
    with pytest.raises(ValueError, match=r"^no tensor declares the dimension E \(declared: B, T, Hq, D, Hk, R\)$"):
        bind_sizes(ROPE, {"E": 3})
    with pytest.raises(ValueError, match=r"^the size of \*batch must be a tuple of ints >= 0, got 3$"):
        bind_sizes(NORM, {"*batch": 3})
    with pytest.raises(ValueError, match=r"^the size of D must be an int >= 0, got -1$"):
        bind_sizes(NORM, {"D": -1})
    drawn = bind_sizes(NORM, {"*batch": (2, 3), "D": 8})
    with pytest.raises(ValueError, match=r"^x has D = 4 \(its dim 2\) but the sizes give D = 8$"):
        drawn.bind({"x": torch.randn(2, 3, 4)})


def test_a_sequence_of_declarations_is_cached():
    decls = ("x: [*, D] float", "w: [D] float optional")
    assert bind(decls, {"x": torch.randn(2, 3)}).declaration is bind(list(decls), {"x": torch.randn(1, 3)}).declaration
    with pytest.raises(
        TypeError, match=r"^decls must be a sequence of declarations \(or a Declaration\), not a single one$"
    ):
        bind("x: [*, D]", {"x": torch.randn(2)})


# ---------------------------------------------------------------- the row-wise short forms


def test_roles_as_declarations():
    assert [
        str(s.from_role(n, r)) for n, r in [("x", s.ROWS), ("w", s.VECTOR), ("rstd", s.PER_ROW), ("dw", s.REDUCED)]
    ] == ["x: [*, D] float", "w: [D] float", "rstd: [*] float", "dw: [D] float"]
    assert s.from_role("w", s.VECTOR, optional=True, grad=True).optional
    with pytest.raises(
        ValueError, match=r"^f: role 'free' has no short form \(one of rows, vector, per_row, reduced\)$"
    ):
        s.from_role("f", s.FREE)
    rms = catalog.get("rms_norm")
    assert [str(t) for t in s.rowwise(rms.inputs).inputs] == ["x: [*, D] float", "weight: [D] float optional"]


def _today(x, weight=None, rstd=None, dy=None):
    """Today's row-wise checks (``tileport.ops._checks``) of an (M, D)-style operator's tensors."""
    _checks.floating_tensor(x, "x")
    _checks.vector_tensor(weight, "weight", x)
    if rstd is not None:
        _checks.per_row_tensor(rstd, "rstd", x)
    if dy is not None:
        _checks.like_rows(dy, "dy", x)


SHORT = Declaration(
    (
        s.from_role("x", s.ROWS),
        s.from_role("weight", s.VECTOR, optional=True),
        s.from_role("rstd", s.PER_ROW, optional=True),
        s.from_role("dy", s.ROWS, optional=True),
    )
)


def _outcome(check, **tensors):
    try:
        check(**tensors)
    except (TypeError, ValueError) as exc:
        return type(exc)
    return None


@pytest.mark.parametrize(
    "tensors",
    [
        {"x": torch.randn(4, 8), "weight": torch.randn(8)},
        {"x": torch.randn(4, 8), "weight": torch.randn(7)},
        {"x": torch.randn(4, 8), "weight": torch.randn(1, 8)},
        {"x": torch.randn(4, 8), "weight": torch.randn(8).half()},  # a weight of another floating dtype: accepted
        {"x": torch.randn(4, 8), "weight": torch.zeros(8, dtype=torch.int64)},
        {"x": torch.randn(4, 8), "rstd": torch.randn(4)},
        {"x": torch.randn(4, 8), "rstd": torch.randn(8)},
        {"x": torch.randn(2, 3, 8), "rstd": torch.randn(2, 3)},
        {"x": torch.randn(2, 3, 8), "rstd": torch.randn(6)},
        {"x": torch.randn(8), "rstd": torch.tensor(1.0)},
        {"x": torch.randn(2, 3, 8), "dy": torch.randn(2, 3, 8)},
        {"x": torch.randn(2, 3, 8), "dy": torch.randn(3, 2, 8)},
        {"x": torch.randn(2, 3, 8), "weight": torch.randn(8, device="meta")},
        {"x": torch.tensor(1.0)},
        {"x": torch.zeros(4, 8, dtype=torch.int32)},
        {"x": torch.randn(0, 8), "weight": torch.randn(8), "rstd": torch.randn(0)},
    ],
    ids=lambda t: ",".join(f"{k}{tuple(v.shape)}{'' if v.dtype == torch.float32 else v.dtype}" for k, v in t.items()),
)
def test_short_forms_decide_as_todays_checks(tensors):
    today = _outcome(_today, **tensors)
    declared = _outcome(lambda **ts: bind(SHORT, ts), **tensors)
    assert declared == today

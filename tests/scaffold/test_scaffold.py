"""`tileport scaffold`: a new operator's files from a signature (or an operator it is made like), its interface
derived from the declaration it writes; its tests run at once and fail on the TODOs."""

import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from tileport.ops import catalog
from tileport.ops import spec as s
from tileport.scaffold import ScaffoldError, class_name, default_like, default_root, plan, render

ROOT = default_root()
GATED = {
    "inputs": "x:rows,gate:rows,weight:vector?",
    "attrs": "eps=1e-6,activation=silu|sigmoid",
    "outputs": "y:rows,rstd:per_row",
}


@pytest.mark.parametrize("name", ["Bad", "2norm", "soft-plus", "class", "x y", ""])
def test_names_that_are_not_lower_case_identifiers_are_refused(name):
    with pytest.raises(ScaffoldError, match="not a valid lower-case Python identifier"):
        plan(name)


@pytest.mark.parametrize("name", ["l2norm", "rms_norm", "available_backends"])
def test_existing_operators_and_api_names_are_never_overwritten(name):
    with pytest.raises(ScaffoldError, match="exists already"):
        plan(name)


@pytest.mark.parametrize(
    "signature,message",
    [
        ({"like": "nope"}, "--like 'nope' is not an operator"),
        ({"inputs": "x:rows"}, "give --like OP, or --inputs and --outputs"),
        (
            {"inputs": "x:matrix", "outputs": "y:rows"},
            r"--inputs: 'x:matrix' is not NAME:ROLE with ROLE one of rows, vector",
        ),
        ({"inputs": "w:vector,x:rows", "outputs": "y:rows"}, "the first input must be a required rows tensor"),
        ({"inputs": "x:rows", "outputs": "s:per_row"}, "the first output must be a rows tensor"),
        ({"inputs": "x:rows", "attrs": "eps", "outputs": "y:rows"}, r"--attrs: 'eps' is not NAME=DEFAULT"),
        ({"inputs": "x:rows,backend:rows", "outputs": "y:rows"}, "names used twice or reserved: backend"),
    ],
)
def test_a_signature_that_cannot_be_written_is_refused_by_name(signature, message):
    with pytest.raises(ScaffoldError, match=message):
        plan("soft_sign", **signature)


def test_plan_names_every_layer_the_export_line_and_what_remains():
    p = plan("soft_gate", **GATED)
    written = {str(path.relative_to(ROOT)) for path in p.files}
    assert {
        "tileport/ops/soft_gate/__init__.py",
        "tileport/ops/soft_gate/spec.py",
        "tileport/ops/soft_gate/_interface.py",
        "tileport/backends/torch/soft_gate.py",
        "tileport/backends/tilelang/cpu/soft_gate.py",
        "tileport/backends/tilelang/cuda/soft_gate.py",
        "tileport/backends/tilelang/ascend/soft_gate.py",
        "tileport/backends/triton/soft_gate.py",
        "tileport/cases/suites/soft_gate.yaml",
        "tests/ops/test_soft_gate_numerics.py",
        "tests/ops/test_soft_gate_errors.py",
        "docs/ops/soft_gate.md",
    } == written
    assert p.export.startswith("from .soft_gate import SoftGate, soft_gate, soft_gate_bwd, soft_gate_fwd")
    assert class_name("group_norm") == "GroupNorm"
    assert not any("$" in text for text in p.files.values())  # every placeholder filled
    docs = next(t for path, t in p.files.items() if path.suffix == ".md")
    assert (
        all(item in docs for item in p.remains) and "`row_map`" in docs and "`inv_rms`" in docs and "`tp_exp`" in docs
    )


def test_the_signature_is_the_declaration():
    p = plan("soft_gate", **GATED)
    sig = p.signature
    assert [(t.name, t.role, t.optional) for t in sig.inputs] == [
        ("x", "rows", False),
        ("gate", "rows", False),
        ("weight", "vector", True),
    ]
    assert [(a.name, a.kind, a.default) for a in sig.attrs] == [("eps", s.EPS, 1e-6), ("activation", s.CHOICE, "silu")]
    assert sig.attrs[1].choices == ("silu", "sigmoid")
    assert sig.backward.tensors == ("x", "gate", "rstd", "dy", "weight")
    assert [(t.name, t.role) for t in sig.grads] == [("dx", "rows"), ("dgate", "rows"), ("dweight", "reduced")]
    spec = next(t for path, t in p.files.items() if path.name == "spec.py")
    assert "backward=s.Backward(('x', 'gate', 'rstd', 'dy', 'weight'), ('eps', 'activation'))" in spec


FORWARD_ONLY = sorted(n for n, sp in catalog.kernel_specs().items() if sp.backward is None and not sp.grads)


@pytest.mark.parametrize("like", sorted(set(catalog.kernel_specs()) - set(FORWARD_ONLY)))
def test_like_any_operator_writes_valid_python_and_keeps_its_fields(like):
    p = plan("group_thing", like=like)
    for path, text in p.files.items():
        if path.suffix == ".py":
            with warnings.catch_warnings():  # an invalid escape in a generated string is a bug in the template
                warnings.simplefilter("error")
                compile(text, str(path), "exec")
    spec_text = next(t for path, t in p.files.items() if path.name == "spec.py")
    base = catalog.get(like)
    assert f"from tileport.ops.{like}.spec import SPEC as LIKE" in spec_text
    for field in ("workloads", "bar", "sweep"):
        assert f"{field}=LIKE.{field},  # kept from {like}" in spec_text
    if base.near_eps is not None:
        assert f"near_eps=LIKE.near_eps,  # kept from {like}" in spec_text
    if base.general:  # its kernels are handed tensors as its own are; no out= buffers
        assert f"unit_stride=LIKE.unit_stride,  # kept from {like}" in spec_text
    else:
        assert f"kernel_out={base.kernel_out!r}" in spec_text
    own = {
        f
        for f in ("originals", "competitors", "studies", "golden", "aliases", "case_attrs", "docs")
        if getattr(base, f) and not (f == "case_attrs" and base.general)  # a general one's suite sets them: kept
    }
    assert set(p.left_out) == own | ({"run"} if base.own_run else set())
    if p.left_out:
        assert any(", ".join(p.left_out) in item for item in p.remains)


@pytest.mark.parametrize("like", FORWARD_ONLY)
def test_like_a_forward_only_operator_is_refused_by_name(like):
    with pytest.raises(ScaffoldError, match=rf"^{like} is forward-only \(no backward, as a decode step\)"):
        plan("group_thing", like=like)


def test_default_like_is_the_simplest_operator():
    spec = catalog.get(default_like())
    assert len(spec.inputs) + len(spec.attrs) == min(len(o.inputs) + len(o.attrs) for o in catalog.specs().values())


class _OneOutput:
    """A one-output operator (y = x * w) standing in for the scaffolded ``scaled``: its forward returns a lone
    tensor, as the interface does for one output; ``wrong_row`` spoils that row of the tilelang side's y."""

    def __init__(self, wrong_row=None):
        self.wrong_row = wrong_row

    def scaled_fwd(self, x, w, backend):
        y = x * w
        if backend == "tilelang" and self.wrong_row is not None:
            y[self.wrong_row] += 1.0
        return y

    def scaled_bwd(self, x, w, dy, backend):
        return dy * w, (dy * x).sum(0)

    def scaled(self, x, w):
        return x * w


def _scaffolded_numerics(ops) -> dict:
    """The numerics test scaffolded for a one-output signature, loaded with ``ops`` as the operator."""
    sig = plan("scaled", inputs="x:rows,w:vector", outputs="y:rows").signature
    ns = {"__name__": "test_scaled_numerics"}
    exec(compile(render.numerics_text("scaled", sig, ops_import="OPS = None"), "test_scaled_numerics.py", "exec"), ns)
    ns["OPS"], ns["_backend_or_skip"] = ops, lambda name: None
    return ns


def _scaled_golden(op, x, w, dy):
    x, w, dy = x.double(), w.double(), dy.double()
    return {"y": x * w, "dx": dy * w, "dw": (dy * x).sum(0)}


@pytest.mark.parametrize("D", [7, 100])
def test_the_scaffolded_numerics_test_compares_a_lone_output_whole(D, randn):
    """One output: the forward returns a tensor, not a tuple; zipping it with ('y',) would judge its first row
    alone. The scaffolded test passes a right operator and catches a wrong last row."""
    test = _scaffolded_numerics(_OneOutput())["test_forward_and_backward_match_golden"]
    test("tilelang", torch.float32, D, _scaled_golden, randn)
    spoiled = _scaffolded_numerics(_OneOutput(wrong_row=-1))["test_forward_and_backward_match_golden"]
    with pytest.raises(AssertionError, match="dual-benchmark"):
        spoiled("tilelang", torch.float32, D, _scaled_golden, randn)


def _copy_checkout(dest: Path) -> None:
    for part in ("tileport", "tests", "docs", "scripts"):
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__", "*-verify*", "*-bench"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    git = ["git", "-C", str(dest), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "checkout"], check=True)


def _last_cell(table: str, name: str) -> str:
    """The last column of the row of ``name`` in a printed table, its wrapped lines joined."""
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│")]
    start = next(i for i, r in enumerate(rows) if r[0] == name)
    end = next((i for i in range(start + 1, len(rows)) if rows[i][0]), len(rows))
    return " ".join(r[-1] for r in rows[start:end] if r[-1])


# Tests that enumerate the operators: with a scaffolded one present they must still pass (or say it is unfinished).
ENUMERATING = [
    "tests/backends/test_registry.py::test_available_backends_report",
    "tests/cases/test_schema.py",
    "tests/test_seam.py",
    "tests/ops/test_interface.py",
    "tests/ops/test_generated_interface.py",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "how,whole",
    [({"like": "rms_norm"}, False), (GATED, True), ({"inputs": "x:rows,weight:vector", "outputs": "y:rows"}, False)],
    ids=["like-rms_norm", "two-rows-signature", "one-output-signature"],
)
def test_a_scaffolded_operator_is_wired_and_its_tests_fail_on_the_todos(tmp_path, how, whole):
    """Every form writes its files and tests that fail on its TODOs alone, and leaves the tests that enumerate the
    operators passing; the command line around the scaffolded operator (ops, verify, lower) does not depend on the
    form, so it runs for one (``whole``): each subprocess here starts tileport anew."""
    _copy_checkout(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    cli = [sys.executable, "-m", "tileport.cli"]
    args = [a for k, v in how.items() for a in (f"--{k}", v)]
    made = subprocess.run(cli + ["scaffold", "soft_gate", *args], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert "What remains to write" in made.stdout and "tileport/backends/tilelang/cpu/soft_gate.py" in made.stdout
    status = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain"], capture_output=True, text=True
    ).stdout.splitlines()
    assert [s for s in status if not s.startswith("?? ")] == [
        " M tileport/ops/__init__.py"
    ]  # new files + the export line
    if whole:
        again = subprocess.run(cli + ["scaffold", "soft_gate"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert again.returncode != 0 and "exists already" in again.stdout + again.stderr
        listed = subprocess.run(cli + ["ops"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert _last_cell(listed.stdout, "soft_gate") == "stubs: tilelang, torch, triton", (
            listed.stdout
        )  # stubs are not support
        assert _last_cell(listed.stdout, "rms_norm") == "tilelang, torch, triton", listed.stdout
        served = subprocess.run(
            [
                sys.executable,
                "-c",
                "import tileport; print({b.name: (b.serves, b.stubs) for b in tileport.available_backends()})",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        tilelang = eval(served.stdout)["tilelang"]
        assert "soft_gate" not in tilelang[0] and "rms_norm" in tilelang[0] and tilelang[1] == ("soft_gate",), (
            served.stdout + served.stderr
        )
        verified = subprocess.run(
            cli
            + ["verify", "soft_gate", "--level", "quick", "--dtype", "fp32", "--no-perf", "--out", str(tmp_path / "v")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        said = verified.stdout + verified.stderr
        assert verified.returncode == 1 and "not implemented: TODO(soft_gate)" in said and "Traceback" not in said, (
            said[-3000:]
        )
        assert "not implemented: TODO(soft_gate): the torch forward" in (tmp_path / "v" / "report.md").read_text()
        lowered = subprocess.run(
            cli + ["lower", "soft_gate", "--target", "cuda", "--out", str(tmp_path / "low")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert lowered.returncode == 2 and "TODO(soft_gate)" in lowered.stderr + lowered.stdout
        assert "Traceback" not in lowered.stderr + lowered.stdout
    tests = ["tests/ops/test_soft_gate_numerics.py", "tests/ops/test_soft_gate_errors.py"]
    wide = dict(env, COLUMNS="1000")  # the summary's lines keep each failure's message whole
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=tmp_path,
        env=wide,
        capture_output=True,
        text=True,
    )
    out = run.stdout
    assert run.returncode == 1, out[-3000:]
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert failed and all("test_soft_gate_numerics.py" in line for line in failed), out[-3000:]  # the checks pass
    # every failure is the TODO, none a broken test (valid Python, names defined, calls that fit the operator)
    assert all(" - NotImplementedError: TODO(soft_gate)" in line for line in failed), "\n".join(failed)
    assert not any(e in out for e in ("NameError", "TypeError", "SyntaxError", "AttributeError")), out[-3000:]
    assert "test_empty_rows_give_empty_outputs_and_declared_statistics" not in "".join(failed)
    enum = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ENUMERATING],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert enum.returncode == 0, enum.stdout[-3000:]


@pytest.mark.slow
def test_an_out_of_tree_package_installs_is_listed_and_fails_honestly_on_its_todos(tmp_path):
    """``--package DIR``: a package of its own whose pyproject declares the ``tileport.ops`` entry point; once
    installed (here into a folder, as ``pip install`` would into site-packages) tileport lists the operator with
    its package, verifies it (failing, naming the TODO, until the math is written), and its tests run."""
    folder = tmp_path / "my-gate"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "tileport.cli",
            "scaffold",
            "soft_gate",
            "--package",
            str(folder),
            *[a for k, v in GATED.items() for a in (f"--{k}", v)],
        ],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    assert 'soft_gate = "my_gate.spec:SPEC"' in (folder / "pyproject.toml").read_text()
    site = tmp_path / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(folder),
        ],
        capture_output=True,
        text=True,
    )
    assert pip.returncode == 0, pip.stderr
    env = dict(os.environ, PYTHONPATH=str(site))
    cli = [sys.executable, "-m", "tileport.cli"]
    listed = subprocess.run(cli + ["ops"], env=env, capture_output=True, text=True)
    assert any("soft_gate" in line and "my-gate 0.1.0" in line for line in listed.stdout.splitlines()), listed.stdout
    ran = subprocess.run(
        cli + ["verify", "soft_gate", "--level", "quick", "--dtype", "fp32", "--no-perf", "--out", str(tmp_path / "v")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 1 and "TODO(soft_gate)" in (tmp_path / "v" / "report.md").read_text()
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder / "tests")],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    failed = [line for line in tests.stdout.splitlines() if line.startswith("FAILED")]
    assert tests.returncode == 1 and "NotImplementedError: TODO(soft_gate)" in tests.stdout, tests.stdout[-3000:]
    assert failed and all("test_soft_gate_numerics.py" in line for line in failed), tests.stdout[-3000:]


# ---------------------------------------------------------------- operators of any shape (named dimensions)

ROPE_LIKE = {
    "inputs": "q:[B,T,H,D],cos:[T,R/2]:nograd,sin:[T,R/2]:nograd",
    "outputs": "q_out:[B,T,H,D]",
    "where": "R <= D",
}


def _text(p, name: str) -> str:
    return next(t for path, t in p.files.items() if path.name == name)


def test_a_general_signature_is_read_into_declarations():
    """NAME:[SHAPE] items: the first input float with a gradient, other floating ones like it with one unless
    nograd, integer ones without, ``?`` optional; outputs like the first input; the constraints kept."""
    sig = plan(
        "soft_rope",
        inputs="q:[B,T,H,D],k:[B,T,Hk,D]?,cos:[T,R/2]:nograd,pos:[B,T]:index?,"
        "lab:[B]:int32:in[0,T),m:[B]:bool,w:[D]:float:nograd",
        attrs="interleaved=false,dim=-1",
        outputs="q_out:[B,T,H,D],k_out:[B,T,Hk,D]?,n:[B]:int64",
        where="R <= D; Hk <= H",
    ).signature
    assert sig.general and sig.where == ("R <= D", "Hk <= H")
    assert [str(t) for t in sig.inputs] == [
        "q: [B, T, H, D] float grad",
        "k: [B, T, Hk, D] like:q grad optional",
        "cos: [T, R/2] like:q",
        "pos: [B, T] index optional",
        "lab: [B] int32 in [0, T)",
        "m: [B] bool",
        "w: [D] float",
    ]
    outs = ["q_out: [B, T, H, D] like:q", "k_out: [B, T, Hk, D] like:q optional", "n: [B] int64"]
    assert [str(t) for t in sig.outputs] == outs
    assert [(a.name, a.kind) for a in sig.attrs] == [("interleaved", s.BOOL), ("dim", s.INT)]  # no dimension to move
    assert sig.options == ()


def test_the_general_backward_takes_each_output_gradient_and_every_input():
    """``d<output>`` of each floating output (its shape: the declaration's), then every input and attribute; it gives
    ``d<input>`` for each input with a gradient, like it and optional where it is."""
    sig = plan(
        "soft_rope",
        inputs="q:[B,T,H,D],k:[B,T,Hk,D]?,cos:[T,R/2]:nograd",
        attrs="scale=1.0",
        outputs="q_out:[B,T,H,D],k_out:[B,T,Hk,D]?,n:[B]:int64",
        where="R <= D",
    ).signature
    assert sig.backward.tensors == ("dq_out", "dk_out", "q", "k", "cos") and sig.backward.attrs == ("scale",)
    assert [str(t) for t in sig.grads] == ["dq: [B, T, H, D] like:q", "dk: [B, T, Hk, D] like:k optional"]


@pytest.mark.parametrize(
    "signature,message",
    [
        ({"inputs": "q:[B,,D]", "outputs": "y:[B,D]"}, r"--inputs: 'q:\[B,,D\]': .*item 2 \(column 3\) is empty"),
        ({"inputs": "q:[B,D]:half", "outputs": "y:[B,D]"}, r"--inputs: 'q:\[B,D\]:half': unknown word 'half'"),
        ({"inputs": "q:[B,D],p:[B]:index:grad", "outputs": "y:[B,D]"}, r"'p:\[B\]:index:grad': only a floating tensor"),
        ({"inputs": "q:[B,D],p:[B]:in[0,D)", "outputs": "y:[B,D]"}, r"'p:\[B\]:in\[0,D\)': a value range belongs to"),
        ({"inputs": "q:[B,D]?", "outputs": "y:[B,D]"}, "the first input is the primary, a required floating tensor"),
        ({"inputs": "q:[B,D]:nograd", "outputs": "y:[B,D]"}, "no input has a gradient"),
        ({"inputs": "q:[B,D],c:[D]:like:z", "outputs": "y:[B,D]"}, "--inputs: c has the dtype of z, which is not"),
        ({"inputs": "q:[B,D],q:[D]", "outputs": "y:[B,D]"}, "--inputs: names used twice: q"),
        ({"inputs": "q:[B,D]", "outputs": "y:[B,X]"}, r"--outputs: y: y \[B, X\] has X, which no input has"),
        ({"inputs": "q:[B,D]", "outputs": "y:rows"}, "give the outputs by named dimensions"),
        ({"inputs": "q:[B,D]", "outputs": "y:[B,D]:nograd"}, "an output takes a dtype and"),
        ({"inputs": "q:[B,D]", "outputs": "y:[B,D]", "where": "R < D"}, "--where: the constraint R < D reads R, which"),
        ({"inputs": "q:[B,D]", "outputs": "y:[B,D]", "where": "D <"}, "--where: 'D <': malformed constraint"),
        ({"inputs": "q:[B,D]", "outputs": "y:[B,D]", "where": "D > 2 * D"}, "no sizes of q's dimensions found"),
        ({"inputs": "q:[B,D],w:[D]?", "outputs": "y:[B,D]"}, "w is optional with a gradient, but each"),
        ({"inputs": "q:[B,D],backend:[D]", "outputs": "y:[B,D]"}, "names used twice or reserved: backend"),
        ({"inputs": "q:[B,D]", "outputs": "y:[B,D]", "attrs": "t=x|y|z,B=1"}, "B named both a dimension and an"),
        ({"inputs": "x:rows", "outputs": "y:rows", "where": "R <= D"}, "--where: constraints are between named"),
        ({"inputs": "x:rows", "outputs": "y:[B,D]"}, "needs --inputs by named dimensions too"),
        ({"like": "rope", "inputs": "x:rows"}, "--outputs: rope's are by named dimensions"),
    ],
)
def test_a_general_signature_that_cannot_be_written_is_refused_by_name(signature, message):
    with pytest.raises(ScaffoldError, match=message):
        plan("soft_rope", **signature)


def test_a_general_plan_writes_its_interface_and_tests_with_the_checks_own_messages():
    p = plan("soft_rope", **ROPE_LIKE)
    written = {str(path.relative_to(ROOT)) for path in p.files}
    assert "tileport/ops/soft_rope/_interface.py" in written and "tileport/cases/suites/soft_rope.yaml" in written
    assert p.export.startswith("from .soft_rope import SoftRope, soft_rope, soft_rope_bwd, soft_rope_fwd")
    for path, text in p.files.items():
        assert not re.search(r"\$\{?[A-Za-z_]", text), path  # every placeholder filled
        if path.suffix == ".py":
            compile(text, str(path), "exec")
    interface = _text(p, "_interface.py")
    assert interface.startswith('"""The interface of soft_rope, generated from its spec by `tileport generate`.')
    assert "from .spec import SPEC\n" in interface and "def soft_rope(q, cos, sin, *, backend=None):" in interface
    spec = _text(p, "spec.py")
    assert '"q: [B, T, H, D] float grad",' in spec and 'WHERE = ("R <= D",)' in spec and '"R": b.size("D")' in spec
    assert 's.Backward(("dq_out", "q", "cos", "sin"), ())' in spec and '"bandwidth_share", 0.8,' in spec
    cpu = next(t for path, t in p.files.items() if "tilelang/cpu" in str(path))
    assert "def forward(q, cos, sin):" in cpu and "def backward(dq_out, q, cos, sin):" in cpu
    assert 'STUB = "TODO(soft_rope)' in cpu
    errors = _text(p, "test_soft_rope_errors.py")
    assert '("cos", (4, 4), "cos has T = 4 (its dim 0) but q has T = 3 (its dim 1)")' in errors
    assert '("sin", (3, 5), "sin has R/2 = 5 (its dim 1) but cos has R/2 = 4 (its dim 1)")' in errors
    assert '("cos", torch.float16, "cos must have the dtype of q (torch.float32), got torch.float16")' in errors
    assert "the sizes must satisfy R <= D, got R = 10, D = 8" in errors
    numerics = _text(p, "test_soft_rope_numerics.py")
    assert '{"B": 2, "T": 3, "H": 2, "D": 8, "R": 8},' in numerics
    assert 'BACKWARD = ("dq_out", "q", "cos", "sin")' in numerics
    docs = _text(p, "soft_rope.md")
    assert all(item in docs for item in p.remains) and "--where 'R <= D'" in docs and "`rotate_heads`" in docs


@pytest.mark.parametrize(
    "signature",
    [
        ROPE_LIKE,
        {"inputs": "x:[*batch,2*F]", "outputs": "y:[*batch,F]"},
        {"inputs": "logits:[N,C],target:[N]:index:in[0,C)", "attrs": "smoothing=0.0", "outputs": "loss:[]"},
        {
            "inputs": "q:[B,T,H,D],k:[B,T,Hk,D]?,cos:[T_ro,R/2]:nograd",
            "outputs": "q_out:[B,T,H,D],k_out:[B,T,Hk,D]?",
            "where": "R <= D, H % Hk == 0, T <= T_ro",
        },
        {"inputs": "x:[M,D],w:[D]", "outputs": "y:[M,D]", "where": "D % 64 == 0"},
    ],
    ids=["rope-like", "glu-like", "cross-entropy-like", "gqa", "primary-constraint"],
)
def test_the_sizes_drawn_satisfy_the_constraints(signature):
    """Every test size, and the spec's ``sizes`` at every bench shape, binds the whole declaration and its
    constraints."""
    from tileport.ops import dims
    from tileport.scaffold import declared

    sig = plan("soft_rope", **signature).signature
    sizing = declared.sizing(sig)
    decl = declared.as_spec("soft_rope", sig).declaration
    for sizes in sizing.tests:
        b = dims.bind_sizes(decl, sizes)
        assert all(isinstance(b.shape_of(t), tuple) for t in decl.tensors)
    for shape in sizing.sweep:
        q = dims.bind(sig.inputs[:1], {sig.inputs[0].name: torch.empty(shape, device="meta")})
        rules = {k: q.size(r) if isinstance(r, str) else r for k, r in sizing.rules.items()}
        dims.bind_sizes(decl, q.sizes | rules)


def test_a_general_operator_package_out_of_tree_has_its_interface_kernels_and_suite(tmp_path):
    """``--package DIR`` with a general signature: the package's spec names its kernel modules and suite, and its
    ``_interface.py`` binds that spec (what ``tileport generate`` writes once the package is installed)."""
    p = plan("soft_rope", package=tmp_path / "my-rope", **ROPE_LIKE)
    written = {str(path.relative_to(tmp_path / "my-rope")) for path in p.files}
    assert {
        "pyproject.toml",
        "my_rope/spec.py",
        "my_rope/_interface.py",
        "my_rope/kernels/cpu.py",
        "my_rope/suite.yaml",
        "tests/test_soft_rope_numerics.py",
        "tests/conftest.py",
    } <= written
    for path, text in p.files.items():
        if path.suffix == ".py":
            compile(text, str(path), "exec")
    spec = _text(p, "spec.py")
    assert "'tilelang': 'my_rope.kernels.cpu'" in spec and 'suite="suite.yaml"' in spec
    assert "from .spec import SPEC\n" in _text(p, "_interface.py")
    assert "import my_rope as OPS" in _text(p, "test_soft_rope_errors.py") and p.export == ""


def test_like_a_general_operator_keeps_its_signature_and_its_suite():
    p = plan("rope_copy", like="rope")
    rope = catalog.get("rope")
    assert (p.signature.inputs, p.signature.backward, p.signature.where) == (rope.inputs, rope.backward, rope.where)
    suite = _text(p, "rope_copy.yaml")
    assert "name: rope_copy" in suite and "api: tileport.rope_copy_fwd" in suite and "kind: positions" in suite
    changed = plan("rope_copy", like="rope", attrs="interleaved=false").signature  # a part replaced: default backward
    assert changed.backward.tensors == ("dq_out", "dk_out", "q", "k", "cos", "sin", "position_ids", "offsets")


def _run(args, cwd, env, **kw):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, **kw)


@pytest.mark.slow
def test_a_scaffolded_general_operator_is_wired_and_its_tests_fail_on_the_todos(tmp_path):
    """A rope-like operator from its declaration by named dimensions: only new files and the export line; its
    ``_interface.py`` is what its spec generates; ``tileport ops`` lists it as stubs; verify and lower name the TODO
    without a traceback; its numerics tests fail on the TODOs alone, its errors tests pass."""
    _copy_checkout(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    cli = [sys.executable, "-m", "tileport.cli"]
    args = [a for k, v in ROPE_LIKE.items() for a in (f"--{k}", v)]
    made = _run(cli + ["scaffold", "soft_rope", *args], tmp_path, env)
    assert made.returncode == 0, made.stderr
    assert "tileport/ops/soft_rope/_interface.py" in made.stdout and "What remains to write" in made.stdout
    status = _run(["git", "-C", str(tmp_path), "status", "--porcelain"], tmp_path, env).stdout.splitlines()
    assert [s for s in status if not s.startswith("?? ")] == [" M tileport/ops/__init__.py"]  # and new files
    assert _run(cli + ["generate", "--check", "soft_rope"], tmp_path, env).returncode == 0
    listed = _run(cli + ["ops"], tmp_path, env)
    assert _last_cell(listed.stdout, "soft_rope") == "stubs: tilelang, torch, triton", listed.stdout
    verify = ["verify", "soft_rope", "--level", "quick", "--dtype", "fp32", "--no-perf", "--out", str(tmp_path / "v")]
    verified = _run(cli + verify, tmp_path, env)
    said = verified.stdout + verified.stderr
    assert verified.returncode == 1 and "not implemented: TODO(soft_rope)" in said, said[-3000:]
    assert "Traceback" not in said, said[-3000:]
    assert "not implemented: TODO(soft_rope): the torch forward" in (tmp_path / "v" / "report.md").read_text()
    lowered = _run(cli + ["lower", "soft_rope", "--target", "cuda", "--out", str(tmp_path / "low")], tmp_path, env)
    assert lowered.returncode == 2 and "TODO(soft_rope)" in lowered.stderr + lowered.stdout
    assert "Traceback" not in lowered.stderr + lowered.stdout
    tests = ["tests/ops/test_soft_rope_numerics.py", "tests/ops/test_soft_rope_errors.py"]
    wide = dict(env, COLUMNS="1000")  # the summary's lines keep each failure's message whole
    run = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *tests], tmp_path, wide)
    out = run.stdout
    assert run.returncode == 1, out[-3000:]
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    passed = [line for line in out.splitlines() if line.startswith("PASSED")]
    assert failed and all("test_soft_rope_numerics.py" in line for line in failed), out[-3000:]  # the checks pass
    assert all(" - NotImplementedError: TODO(soft_rope)" in line for line in failed), "\n".join(failed)
    assert not any(e in out for e in ("NameError", "TypeError", "SyntaxError", "AttributeError")), out[-3000:]
    names = " ".join(passed)
    for test in (
        "test_a_dimension_that_disagrees",
        "test_a_dtype_outside_its_class",
        "test_sizes_that_break_r_le_d",
        "test_an_empty_call_gives_empty_results_without_a_kernel",
        "test_not_a_tensor",
    ):
        assert test in names, out[-3000:]
    current = "tests/ops/test_generated_interface.py::test_each_file_is_what_its_spec_generates"
    enum = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ENUMERATING, current], tmp_path, env)
    assert enum.returncode == 0, enum.stdout[-3000:]


ROPE_DECLARED = {
    "inputs": "q:[B,T,Hq,D],k:[B,T,Hk,D]?,cos:[T_ro,R/2]:nograd,sin:[T_ro,R/2]:nograd,position_ids:[B,T]:index?,"
    "offsets:[B]:index?",
    "attrs": "interleaved=false,offset=0",
    "outputs": "q_out:[B,T,Hq,D],k_out:[B,T,Hk,D]?",
    "where": "R <= D",
}
ADAPTER = """from .rope import forward  # noqa: F401
from .rope import backward as _backward


def backward(dq_out, dk_out, q, k, cos, sin, position_ids, offsets, interleaved, offset):
    return _backward(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset)
"""


@pytest.mark.slow
def test_the_scaffolded_tests_and_suite_pass_once_the_math_is_written(tmp_path):
    """The scaffolded tests are right, not only failing: rope's declaration given on the command line (so the
    default backward, the output gradients and every input), its kernel modules then written as rope's kernels
    behind that backward: the scaffolded numerics and errors tests pass, and so does ``tileport verify`` on the
    scaffolded suite."""
    _copy_checkout(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    cli = [sys.executable, "-m", "tileport.cli"]
    args = [a for k, v in ROPE_DECLARED.items() for a in (f"--{k}", v)]
    made = _run(cli + ["scaffold", "my_rope", *args], tmp_path, env)
    assert made.returncode == 0, made.stderr
    for backend in ("torch", "tilelang/cpu", "triton"):
        (tmp_path / "tileport" / "backends" / backend / "my_rope.py").write_text(ADAPTER)
    tests = ["tests/ops/test_my_rope_numerics.py", "tests/ops/test_my_rope_errors.py"]
    run = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], tmp_path, env)
    assert run.returncode == 0, run.stdout[-3000:]
    verify = ["verify", "my_rope", "--level", "quick", "--dtype", "fp32", "--no-perf", "--backend", "tilelang"]
    verified = _run(cli + verify + ["--out", str(tmp_path / "v")], tmp_path, env)
    assert verified.returncode == 0 and "PASS" in verified.stdout, (verified.stdout + verified.stderr)[-3000:]


@pytest.mark.slow
def test_a_scaffolded_recurrent_operator_draws_its_packed_sequences_and_states_by_its_suite(tmp_path):
    """Like gated DeltaNet's chunk operator: a declaration with states [N, HV, K, V] and packed sequences'
    cu_seqlens [S]. Its suite keeps the rules that hold them together (a packed row of B = 1, N + 1 offsets rising to
    T, a state per sequence, decays <= 0), its tests take their sizes from the suite's fixed ones and draw by its
    rules, and an attribute value only the other operator's own executor reads (scale None) is left out: with the
    math written (that operator's CPU kernels behind it), the scaffolded tests pass."""
    _copy_checkout(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    made = _run([sys.executable, "-m", "tileport.cli", "scaffold", "my_delta", "--like", "chunk_gated_delta_rule"],
                tmp_path, env)  # fmt: skip
    assert made.returncode == 0, made.stderr
    suite = (tmp_path / "tileport" / "cases" / "suites" / "my_delta.yaml").read_text()
    assert "when: no cu_seqlens" in suite and "kind: offsets" in suite and "kind: nonpositive" in suite
    assert "values: [1.0, 0.3]" in suite  # scale's None dropped: the derived interface takes a number
    numerics = (tmp_path / "tests" / "ops" / "test_my_delta_numerics.py").read_text()
    assert "'N': 20, 'S': 21" in numerics.replace('"', "'") and "make_inputs(SUITE, case_at(SUITE" in numerics
    for backend, kernels in (("torch", "torch"), ("tilelang/cpu", "tilelang.cpu"), ("triton", "tilelang.cpu")):
        (tmp_path / "tileport" / "backends" / backend / "my_delta.py").write_text(
            f"from tileport.backends.{kernels}.chunk_gated_delta_rule import backward, forward  # noqa: F401\n"
        )
    tests = ["tests/ops/test_my_delta_numerics.py", "tests/ops/test_my_delta_errors.py"]
    run = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], tmp_path, env)
    assert run.returncode == 0, run.stdout[-3000:]

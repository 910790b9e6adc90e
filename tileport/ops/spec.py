"""What an operator states about itself once: the declaration its interface is derived from
(``tileport.ops.interface``) and what the generic layers (cli, verify, bench, cases, report, docs, lower) read.
They find operators through ``specs()`` and never name one.

An operator is a package ``tileport/ops/<name>/``: ``spec.py`` exposing ``SPEC``, an :class:`OpSpec`, and
``__init__.py`` with its contract docstring and the public names of ``SPEC.api`` (the derived functions,
custom ops, autograd and module). Discovery is by that convention; nothing else lists the operators.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from .dims import Declaration, TensorDecl, decl, gradient_of

ROWS, VECTOR, PER_ROW, REDUCED = "rows", "vector", "per_row", "reduced"
FREE = "free"  # a reference operator's tensor (``tileport.reference``): whatever shape the function gives or takes
FLOATS = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class Tensor:
    """A tensor input or output and its role: ``rows`` (x[..., D], rows independent), ``vector`` (a weight
    [D] broadcast to every row), ``per_row`` (x.shape[:-1], such as rstd), ``reduced`` (a [D] summed across
    rows, such as dweight).

    ``dtype`` (outputs): None for the first input's dtype, ``"stat"`` for fp32 (fp64 for fp64 inputs), or
    the name of a dtype option (``output_dtype``); (a backward's rows results) the name of the backward
    tensor whose dtype it has (``dgate`` in ``gate``'s; default the backward's first rows tensor's). ``empty``: a
    per-row output's value where rows are empty
    (D = 0), a number or a function of the attributes. ``init``: a vector input's initial value as a module
    parameter (1 for a weight, 0 for a bias)."""

    name: str
    role: str
    optional: bool = False
    doc: str = ""
    dtype: str | None = None
    empty: float | Callable[..., float] = math.nan
    init: float = 1.0


# The row-wise roles as short forms of the general declaration: ``*`` is one run for the whole declaration (x's
# leading dimensions), D the reduced last dimension.
ROLE_SHAPES = {ROWS: "[*, D]", VECTOR: "[D]", PER_ROW: "[*]", REDUCED: "[D]"}


def from_role(name: str, role: str, *, optional: bool = False, grad: bool = False) -> TensorDecl:
    """The declaration of a row-wise tensor of ``role`` (floating, as the row-wise checks ask of every role)."""
    if role not in ROLE_SHAPES:
        raise ValueError(f"{name}: role {role!r} has no short form (one of {', '.join(ROLE_SHAPES)})")
    return TensorDecl(name, ROLE_SHAPES[role], "float", grad=grad, optional=optional)


def rowwise(tensors) -> Declaration:
    """A declaration from an OpSpec's row-wise tensors (``spec.inputs``, ``spec.outputs``...), each by its role."""
    return Declaration(tuple(from_role(t.name, t.role, optional=t.optional) for t in tensors))


# Attribute kinds: what the interface checks (and the custom op's schema type).
EPS, REAL, CHOICE, DIM, BOOL, INT, DTYPE, PROB = "eps", "real", "choice", "dim", "bool", "int", "dtype", "prob"


@dataclass(frozen=True)
class Attr:
    """A scalar attribute, its default and the range the interface accepts (said in words in ``valid``,
    checked by ``kind``): ``eps`` (finite, >= 0), ``real`` (finite), ``prob`` (a real in [0, 1]), ``choice`` (one of
    ``choices``, or an
    alias of one in ``aliases``), ``dim`` (the reduced dimension: any, default the last), ``bool``, ``int``,
    ``dtype`` (None or a floating dtype; an option, the default the first input's dtype). ``kw_only``: after
    the ``*`` of the public signatures."""

    name: str
    default: Any
    valid: str = ""
    kind: str = ""
    choices: tuple = ()
    aliases: tuple[tuple[str, str], ...] = ()  # (alias, the choice it stands for)
    kw_only: bool = True


@dataclass(frozen=True)
class Backward:
    """What the backward kernel takes and gives, in its call order: ``tensors`` are saved inputs and
    outputs and the output gradients (``d<output>``: the first output's is required, the others' optional);
    ``attrs`` the forward attributes it takes next; ``given`` the forward attributes it may be given (None:
    not given; autograd gives the forward's), last. ``returns``: its results (default: the spec's grads).
    ``to_grads``: (returns by name, input dtypes by name) -> the inputs' gradients by ``d<input>``, where a
    result is not one input's gradient as it is (one gradient for two inputs)."""

    tensors: tuple[str, ...]
    attrs: tuple[str, ...] = ()
    given: tuple[str, ...] = ()
    returns: tuple[Tensor, ...] = ()
    to_grads: Callable[[dict, dict], dict] | None = None


@dataclass(frozen=True)
class Criterion:
    """One line of a speed bar: ``statistic`` of ``provider`` (a backend, ``{backend}:kernel`` for its
    preallocated-output form) in ``modes`` at ``shapes`` must reach ``target`` (a number, or per dtype).
    ``cause``: the measured reason a miss of it is a miss (profile, disassembly: docs/kernels.md), which
    ``tileport bench`` prints beside each miss; an operator states its own with ``with_causes``."""

    label: str
    modes: tuple[str, ...]
    shapes: tuple[str, ...]
    statistic: str
    target: float | dict[str, float]
    kernel_only: bool = False
    dtypes: tuple[str, ...] = ()  # the dtypes it judges (default: every one)
    cause: str = ""

    def target_for(self, dtype: str) -> float:
        return self.target if isinstance(self.target, (int, float)) else self.target.get(dtype, self.target["default"])


IN_CACHE = ("1024x512", "256x4096")
HEAD_ROWS = ("4096x128", "16384x64", "16384x32")  # a head dimension per row (q/k normalization in attention)
LARGE = ("4096x4096", "16384x4096")
SMALL = ("1x128", "33x100")
SWEEP = [
    (1, 128),
    (33, 100),
    (1024, 512),
    (256, 4096),
    (4096, 128),
    (16384, 64),
    (16384, 32),
    (4096, 4096),
    (16384, 4096),
]
HALF = ("float16", "bfloat16")

# Why the CPU kernels miss what they miss (the figures: docs/kernels.md, docs/notes/measurements.md); an operator
# adds its own with with_causes.
_IN_CACHE_CAUSE = (
    "in cache the kernels are instruction-bound, not memory-bound: two passes over each row and the fp64 "
    "accumulation of the row's sum (its 512-bit conversions run at half rate on some CPUs); a 16-bit element also "
    "takes its widening, narrowing and torch's bf16 NaN pattern (twice fp32's instructions per lane in the map)"
)
_BACKWARD_CAUSE = (
    "the backward's first pass: three fp64 sums per row (x^2, g * x, g^2; the precision standard's dx needs "
    "k = d / (ss + eps) to fp64 accuracy), whose 512-bit conversions run at half rate on some CPUs, and dweight's "
    "compensated accumulation"
)
_CALL_CAUSE = (
    "the public call's Python path: the ctypes call, the launcher's checks, each output's torch.empty, the "
    "interface's checks and dispatch, each about a microsecond (docs/notes/measurements.md)"
)

# The speed bar of a memory-bound row-wise operator on the CPU (issue 30), shared by the row-wise operators:
# kernel-only against the copy of the same bytes (the roofline), the public call against torch eager and
# torch.compile of the composite, 16-bit against fp32 (half the bytes), two threads against one.
ROWWISE_BAR = (
    Criterion(
        "fwd in cache: kernel-only share of copy",
        ("fwd",),
        IN_CACHE,
        "bandwidth_share",
        0.7,
        kernel_only=True,
        cause=_IN_CACHE_CAUSE,
    ),
    Criterion(
        "fwd head-dim rows: kernel-only share of copy",
        ("fwd",),
        HEAD_ROWS,
        "bandwidth_share",
        0.5,
        kernel_only=True,
        cause="a fixed cost per row (the loop's set-up and tail tests, the fp64 lane tree, square root and "
        "division before the row's map can start) that rows of 32-128 columns do not amortize",
    ),
    Criterion("fwdbwd in cache: share of copy", ("fwdbwd",), IN_CACHE, "bandwidth_share", 0.5, cause=_BACKWARD_CAUSE),
    Criterion(
        "fwd 16-bit kernel-only no slower than fp32",
        ("fwd",),
        IN_CACHE + HEAD_ROWS,
        "vs_fp32",
        1.0,
        kernel_only=True,
        dtypes=HALF,
        cause="instruction-bound in cache: a 16-bit element costs more instructions than an fp32 "
        "one (widening, narrowing, the NaN pattern), and half the bytes do not shorten that",
    ),
    Criterion(
        "fwd in cache vs torch.compile",
        ("fwd",),
        IN_CACHE,
        "speedup_vs_compile",
        1.5,
        cause=f"{_IN_CACHE_CAUSE}; {_CALL_CAUSE}",
    ),
    Criterion(
        "fwdbwd in cache vs torch.compile", ("fwdbwd",), IN_CACHE, "speedup_vs_compile", 1.5, cause=_BACKWARD_CAUSE
    ),
    Criterion(
        "fwd in cache vs eager",
        ("fwd",),
        IN_CACHE,
        "speedup_vs_eager",
        {"float32": 1.6, "default": 2.0},
        cause=_IN_CACHE_CAUSE,
    ),
    Criterion("bwd vs eager autograd", ("bwd",), IN_CACHE + LARGE, "speedup_vs_eager", 1.5, cause=_BACKWARD_CAUSE),
    Criterion(
        "fwdbwd vs eager autograd", ("fwdbwd",), IN_CACHE + LARGE, "speedup_vs_eager", 1.5, cause=_BACKWARD_CAUSE
    ),
    Criterion(
        "fwd large: kernel-only share of copy",
        ("fwd",),
        LARGE,
        "bandwidth_share",
        0.9,
        kernel_only=True,
        cause="16-bit: the widening and narrowing keep the kernel below the copy's pace (fp32 "
        "reaches it); with two threads bf16's rounding still does",
    ),
    Criterion(
        "fwd large with allocation vs torch.compile",
        ("fwd",),
        LARGE,
        "speedup_vs_compile",
        2.0,
        cause="the fresh outputs' page faults (huge pages off or not offered)",
    ),
    Criterion(
        "fwd small: per call vs eager",
        ("fwd",),
        SMALL,
        "speedup_vs_eager",
        1.1,
        cause=f"{_CALL_CAUSE}, most for operators with several outputs",
    ),
    Criterion(
        "fwd two threads vs one",
        ("fwd",),
        IN_CACHE + LARGE,
        "thread_scaling",
        1.6,
        cause="large shapes: memory bandwidth (the copy of the same bytes scales about 1.45x); in cache: "
        "the two vCPUs' run-to-run spread (across the 2026-12-05 runs the copy of the same bytes "
        "scaled 1.3-2.1x, the kernels 1.2-1.95x)",
    ),
)


def with_causes(bar: tuple[Criterion, ...], causes: dict[str, str]) -> tuple[Criterion, ...]:
    """``bar`` with an operator's own causes added to the criteria they name (by label)."""
    unknown = set(causes) - {c.label for c in bar}
    if unknown:
        raise ValueError(f"no criterion named {sorted(unknown)[0]!r} in the bar")
    return tuple(
        replace(c, cause=f"{c.cause}; {causes[c.label]}" if c.cause else causes[c.label]) if c.label in causes else c
        for c in bar
    )


# token count x hidden size of common models (one row per token)
MODEL_WORKLOADS = {
    "llama3-8b-decode": (32, 4096),
    "llama3-8b-prefill": (4096, 4096),
    "qwen2.5-7b-prefill": (2048, 3584),
    "llama3-70b-decode": (16, 8192),
    "deepseek-v3-prefill": (1024, 7168),
}


@dataclass(frozen=True)
class Original:
    """The upstream kernel an operator was ported from, run as a competitor where it is installed."""

    name: str  # provider name in tables
    module: str  # import path of the package
    attribute: str  # dotted name of the function inside it
    adapt: Callable[[Callable], Callable] | None = None  # wraps it to the spec's call convention


@dataclass(frozen=True)
class StudyResult:
    """An operator-specific study's table for the verify report."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""
    passed: bool = True
    records: tuple[dict, ...] = ()  # the same rows as data, for results.json


@dataclass(frozen=True)
class OpSpec:
    """Everything the interface and the generic layers need of an operator.

    The declaration the interface is derived from (``api``): ``inputs`` (the first is a ``rows`` tensor: the
    primary, whose rows the others follow), ``attrs`` (scalars cases vary), ``options`` (interface-only
    scalars such as ``output_dtype``), ``outputs``, ``backward`` and ``grads``; ``signatures`` orders the
    public forms' parameters where the default order (tensors, positional attributes, ``*``, the rest,
    ``backend``, ``out``) is not the operator's; ``docs`` are their docstrings.

    The call conventions the generic layers use (all keyword inputs named as in ``inputs`` and ``attrs``):
    - ``function(**inputs, backend=)``: the differentiable public API, returning the main outputs;
    - ``forward(**inputs, backend=, out=None)``: the forward outputs as a tuple (``outputs`` order);
    - ``run(inputs, backend, backward)``: {output name: tensor} of the forward and, when asked, the backward
      through the public API (verify's executor; the inputs dict may hold ``dy``); derived unless given;
    - ``composite(**inputs)``: the torch code users write today (bench's eager and torch.compile baseline);
    - ``example(shape, dtype, device, generator)``: inputs for a benchmark of that shape.
    """

    name: str
    summary: str
    math: str
    inputs: tuple[Tensor, ...]
    attrs: tuple[Attr, ...]
    outputs: tuple[Tensor, ...]
    grads: tuple[Tensor, ...]
    composite: Callable
    example: Callable
    bytes_moved: Callable[[tuple, torch.dtype, str], int]
    backward: Backward | None = None
    options: tuple[Attr, ...] = ()
    case_attrs: tuple[Attr, ...] = ()  # attributes cases set that the op's own ``run`` maps onto the interface
    signatures: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "function"/"forward"/"backward"
    docs: dict[str, str] = field(default_factory=dict)  # the same keys: the public forms' docstrings
    run: Callable[[dict, str | None, bool], dict] | None = None
    dtypes: tuple[torch.dtype, ...] = FLOATS
    modes: tuple[str, ...] = ("fwd", "bwd", "fwdbwd")
    workloads: dict[str, tuple[int, ...]] = field(default_factory=dict)
    sweep: list[tuple[int, ...]] = field(default_factory=lambda: list(SWEEP))
    bar: tuple[Criterion, ...] = ()
    competitors: dict[str, Callable] = field(default_factory=dict)  # torch's own fused op, where one exists
    originals: tuple[Original, ...] = ()
    studies: tuple[Callable[[list, int], StudyResult], ...] = ()
    precision_dtypes: dict[str, torch.dtype] = field(default_factory=dict)  # output -> small-value rule dtype
    near_eps: Callable[[dict, int], float] | None = None  # per-element magnitude where eps decides the row
    kernel_out: bool = False  # forward(out=...) writes into preallocated outputs (bench's `:kernel` provider)
    # A matmul-bound operator's roofline (bench's ``matmul`` provider beside the copy): ``flops(shape, mode)``, the
    # useful matrix-product flops of a call, and ``gemm(shape, dtype, device)``, (a zero-argument torch.matmul
    # call of the operator's own product sizes in that dtype, its flops): ``matmul_share`` is the first's rate
    # over the second's, measured in the same rounds.
    flops: Callable[[tuple, str], float] | None = None
    gemm: Callable[[tuple, torch.dtype, str], tuple[Callable, float]] | None = None
    usage: str = ""  # the docs page's usage block
    aliases: tuple[str, ...] = ()  # names a test kit case file may call the operator by
    model_sites: dict[str, str] = field(default_factory=dict)  # input -> captured model site (L2's model cases)
    # The float64 golden's ``run(inputs, backward)`` where the torch reference in float64 is not the op's exact
    # math (a rounding residue the math does not have); None: the torch reference run in float64.
    golden: Callable[[dict, bool], dict] | None = None
    # An operator outside tileport (``ops/plugins.py``): its backend modules by backend name (``"tilelang:cuda"``
    # for a device kind) and its case suite's YAML (relative to the spec's module); tileport's own are found
    # by their files.
    kernels: dict[str, str] = field(default_factory=dict)
    suite: str | None = None
    # A reference operator's (``tileport.reference``): an implementation given as a class becomes a callable for
    # a dtype (a problem's ModelNew, built as its Model is); and the output gradients' shapes for some inputs.
    build: Callable[[type, torch.dtype], Callable] | None = None
    grad_shapes: Callable[[dict], dict] | None = None
    reference: bool = False  # made from a reference callable: it has no interface of its own
    exact: tuple[str, ...] = ()  # outputs that are not floating point: equal to the golden's, element for element
    # An operator declared by named dimensions (``general``): constraints between its dimensions and attributes;
    # ``unit_stride``: its kernels are handed every tensor with stride 1 in its last dimension (a copy where it
    # has not, such as autograd's expanded gradient of a sum), else the tensors as given.
    where: tuple[str, ...] = ()
    unit_stride: bool = False
    # An operator composed over another operator's kernels (``composes``: that operator's name), such as a loss
    # made of torch's matmul and a row kernel: no kernel module and no derived interface of its own. The backends
    # serving ``composes`` serve it (``kernel_op``), and ``run`` must be given.
    composes: str = ""
    # The differentiable function the generic layers call (``function``: ``public(**inputs, backend=)``, and
    # ``forward`` without autograd) where it is not the derived one: a composed operator's, or a derived one's with
    # what its case attributes ask done around it (q and k normalized before gated DeltaNet's chunks).
    public: Callable | None = None

    def __post_init__(self) -> None:
        for group in ("inputs", "outputs", "grads"):  # one-line declarations parsed (``"q: [B, T, H, D] float grad"``)
            items = tuple(decl(t) if isinstance(t, str) else t for t in getattr(self, group))
            object.__setattr__(self, group, items)
        kinds = {isinstance(t, TensorDecl) for t in self.inputs + self.outputs + self.grads}
        if len(kinds) > 1:
            raise ValueError(
                f"{self.name}: tensors are declared either by role (Tensor) or by named dimensions, not both"
            )
        if self.composes and (self.public is None or self.run is None):
            raise ValueError(
                f"{self.name}: an operator composed over {self.composes!r} gives its public function and run"
            )
        object.__setattr__(self, "own_run", self.run is not None)  # False: the derived executor below
        if self.run is None:  # the derived executor: forward, then backward from what it saved
            object.__setattr__(self, "run", lambda inputs, backend, backward: self.api.run(inputs, backend, backward))

    # Cached on the instance (bench times calls made through them: a dict lookup, not a derivation), without
    # functools.cached_property, whose lock (Python 3.11) torch.compile cannot trace.
    def _cached(self, key: str, make: Callable):
        found = self.__dict__.get(key)
        if found is None:
            found = make()
            object.__setattr__(self, key, found)
        return found

    @property
    def api(self):
        """The interface derived from this declaration (built once per operator, on first use, by what
        ``derive_with`` set)."""
        if self.composes:
            raise ValueError(f"{self.name} is composed over {self.composes}'s kernels: it has no derived interface")
        if _DERIVE is None:
            raise RuntimeError("no interface derivation is set: import tileport.ops (ops/interface sets it)")
        return self._cached("_api", lambda: _DERIVE(self))

    @property
    def function(self) -> Callable:
        return self._cached("_function", lambda: self.public or self.api.function)

    @property
    def forward(self) -> Callable:
        """The forward outputs as a tuple, whatever their number (a composed operator's: its public function's,
        without autograd)."""
        return self._cached("_forward", lambda: _no_grad_tuple(self.public) if self.public else self.api.forward_tuple)

    @property
    def kernel_op(self) -> str:
        """The operator whose kernel modules serve this one: its own name, or the one it is composed over."""
        return self.composes or self.name

    def precision_dtype(self, output: str, dtype: torch.dtype) -> torch.dtype:
        """The dtype whose small-value rule applies to ``output`` (fp32 for fp32 statistics of 16-bit inputs)."""
        fixed = self.precision_dtypes.get(output)
        return dtype if fixed is None or dtype == torch.float64 else fixed

    def run_golden(self, inputs: dict, backward: bool) -> dict:
        """The float64 golden's outputs for inputs already upcast: the spec's own golden, else the torch
        reference."""
        return self.golden(inputs, backward) if self.golden else self.run(inputs, "torch", backward)

    @property
    def general(self) -> bool:
        """Declared by named dimensions (TensorDecls), not by the row-wise roles."""
        return bool(self.inputs) and isinstance(self.inputs[0], TensorDecl)

    @property
    def declaration(self) -> Declaration:
        """Every tensor of the operator by named dimensions: the inputs, then the outputs, the output gradients
        (``d<output>`` in its output's shape: the first required, the others optional) and the input gradients;
        the row-wise roles as their short forms (``from_role``)."""

        def make() -> Declaration:
            if self.general:
                ins, outs, grads = self.inputs, self.outputs, self.grads
            else:
                ins, outs, grads = (
                    [from_role(t.name, t.role, optional=t.optional) for t in group]
                    for group in (self.inputs, self.outputs, self.grads)
                )
            dys = tuple(gradient_of(t, optional=i > 0) for i, t in enumerate(outs))
            names = {t.name for t in (*ins, *outs, *grads)}
            extra = tuple(t for t in dys if t.name not in names)
            return Declaration(
                tuple(ins), tuple(outs) + extra + tuple(grads), self.where, tuple(a.name for a in self.attrs)
            )

        return self._cached("_declaration", make)

    @property
    def stackable(self) -> bool:
        """Cases can be stacked along a new leading dimension (retests batched): only rows go in and come out."""
        if self.general:
            return False
        roles = {t.role for t in self.inputs + self.outputs + self.grads}
        return roles <= {ROWS, PER_ROW}

    def tensor(self, name: str) -> Tensor | None:
        """The declared input or output ``name``; None for one the spec does not declare (a suite's dy)."""
        return next((t for t in self.inputs + self.outputs + self.grads if t.name == name), None)


def _no_grad_tuple(fn: Callable) -> Callable:
    """``fn`` without autograd, its result always a tuple."""

    def forward(**kwargs):
        with torch.no_grad():
            out = fn(**kwargs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    return forward


def rows_bytes(
    shape: tuple[int, ...], dtype: torch.dtype, reads: int, writes: int, per_row: int = 0, vectors: int = 0
) -> int:
    """Minimum traffic of a row-wise call: each (M, D) tensor once, each fp32 per-row value once, each [D] once."""
    n, rows, e = math.prod(shape), math.prod(shape[:-1]), dtype.itemsize
    return (reads + writes) * n * e + 4 * per_row * rows + vectors * shape[-1] * e


# How a declaration becomes its interface: ``ops/interface`` sets it when imported (``ops/__init__`` imports it
# before any operator), so the declaration never imports its derivation.
_DERIVE: Callable | None = None


def derive_with(derive: Callable) -> None:
    """Set how ``OpSpec.api`` derives an operator's interface from its declaration."""
    global _DERIVE
    _DERIVE = derive

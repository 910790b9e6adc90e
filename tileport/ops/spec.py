"""What an operator states about itself once, for the generic layers (cli, verify, bench, cases, report, docs,
lower) to read: they find operators through ``specs()`` and never name one.

An operator is a package ``tileport/ops/<name>/``: its interface (``__init__.py``: checks, dispatch, custom
ops, autograd, module) and ``spec.py`` exposing ``SPEC``, an :class:`OpSpec`. Discovery is by that
convention; nothing else lists the operators.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

ROWS, VECTOR, PER_ROW, REDUCED = "rows", "vector", "per_row", "reduced"
FLOATS = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class Tensor:
    """A tensor input or output and its role: ``rows`` (x[..., D], rows independent), ``vector`` (a weight
    [D] broadcast to every row), ``per_row`` (x.shape[:-1], such as rstd), ``reduced`` (a [D] summed across
    rows, such as dweight)."""

    name: str
    role: str
    optional: bool = False
    doc: str = ""


@dataclass(frozen=True)
class Attr:
    """A scalar attribute, its default and the range the interface accepts (said in words, checked there)."""

    name: str
    default: Any
    valid: str = ""


@dataclass(frozen=True)
class Criterion:
    """One line of a speed bar: ``statistic`` of ``provider`` (a backend, ``{backend}:kernel`` for its
    preallocated-output form) in ``modes`` at ``shapes`` must reach ``target`` (a number, or per dtype)."""

    label: str
    modes: tuple[str, ...]
    shapes: tuple[str, ...]
    statistic: str
    target: float | dict[str, float]
    kernel_only: bool = False

    def target_for(self, dtype: str) -> float:
        return self.target if isinstance(self.target, (int, float)) else self.target.get(dtype, self.target["default"])


IN_CACHE = ("1024x512", "256x4096")
LARGE = ("4096x4096", "16384x4096")
SMALL = ("1x128", "33x100")
SWEEP = [(1, 128), (33, 100), (1024, 512), (256, 4096), (4096, 4096), (16384, 4096)]

# The speed bar of a memory-bound row-wise operator (set in issue 4), shared by the norms.
ROWWISE_BAR = (
    Criterion("fwd in-cache vs eager", ("fwd",), IN_CACHE, "speedup_vs_eager", {"float32": 1.6, "default": 2.0}),
    Criterion("fwd in-cache vs torch.compile", ("fwd",), IN_CACHE, "speedup_vs_compile", 1.5),
    Criterion("fwd large: kernel-only share of copy bandwidth", ("fwd",), LARGE, "bandwidth_share", 0.8, kernel_only=True),
    Criterion("fwd large with allocation vs torch.compile", ("fwd",), LARGE, "speedup_vs_compile", 1.0),
    Criterion("bwd vs eager autograd", ("bwd",), IN_CACHE + LARGE, "speedup_vs_eager", 1.5),
    Criterion("fwdbwd vs eager autograd", ("fwdbwd",), IN_CACHE + LARGE, "speedup_vs_eager", 1.5),
    Criterion("fwd small: per call vs eager (>= 1 is no slower)", ("fwd",), SMALL, "speedup_vs_eager", 1.0),
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
    """Everything the generic layers need of an operator.

    The call conventions (all keyword inputs named as in ``inputs`` and ``attrs``):
    - ``function(**inputs, backend=)``: the differentiable public API, returning the main output;
    - ``forward(**inputs, backend=, out=None)``: the forward outputs as a tuple (``outputs`` order);
    - ``run(inputs, backend, backward)``: {output name: tensor} of the forward and, when asked, the backward
      through the public API (verify's executor; the inputs dict may hold ``dy``);
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
    function: Callable
    forward: Callable
    run: Callable[[dict, str | None, bool], dict]
    composite: Callable
    example: Callable
    bytes_moved: Callable[[tuple, torch.dtype, str], int]
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
    usage: str = ""  # the docs page's usage block
    aliases: tuple[str, ...] = ()  # names a test kit case file may call the operator by
    model_sites: dict[str, str] = field(default_factory=dict)  # input -> captured model site (L2's model cases)
    # The float64 golden's ``run(inputs, backward)`` where the torch reference in float64 is not the op's exact
    # math (a rounding residue the math does not have); None: the torch reference run in float64.
    golden: Callable[[dict, bool], dict] | None = None

    def precision_dtype(self, output: str, dtype: torch.dtype) -> torch.dtype:
        """The dtype whose small-value rule applies to ``output`` (fp32 for fp32 statistics of 16-bit inputs)."""
        fixed = self.precision_dtypes.get(output)
        return dtype if fixed is None or dtype == torch.float64 else fixed

    def run_golden(self, inputs: dict, backward: bool) -> dict:
        """The float64 golden's outputs for inputs already upcast: the spec's own golden, else the torch
        reference."""
        return self.golden(inputs, backward) if self.golden else self.run(inputs, "torch", backward)

    @property
    def stackable(self) -> bool:
        """Cases can be stacked along a new leading dimension (retests batched): only rows go in and come out."""
        roles = {t.role for t in self.inputs + self.outputs + self.grads}
        return roles <= {ROWS, PER_ROW}

    def tensor(self, name: str) -> Tensor | None:
        """The declared input or output ``name``; None for one the spec does not declare (a suite's dy)."""
        return next((t for t in self.inputs + self.outputs + self.grads if t.name == name), None)


def rows_bytes(shape: tuple[int, ...], dtype: torch.dtype, reads: int, writes: int, per_row: int = 0, vectors: int = 0) -> int:
    """Minimum traffic of a row-wise call: each (M, D) tensor once, each fp32 per-row value once, each [D] once."""
    n, rows, e = math.prod(shape), math.prod(shape[:-1]), dtype.itemsize
    return (reads + writes) * n * e + 4 * per_row * rows + vectors * shape[-1] * e


_SPECS: dict[str, OpSpec] = {}


def specs() -> dict[str, OpSpec]:
    """Every operator's spec, found by convention: a package under ``tileport.ops`` with a ``spec`` module."""
    if not _SPECS:
        from .. import ops

        for m in sorted(pkgutil.iter_modules(ops.__path__), key=lambda m: m.name):
            if m.ispkg and not m.name.startswith("_"):
                spec = importlib.import_module(f"{ops.__name__}.{m.name}.spec").SPEC
                _SPECS[spec.name] = spec
    return _SPECS


def get(name: str) -> OpSpec:
    """The spec of operator ``name``; ValueError listing the operators when there is none."""
    found = specs().get(name)
    if found is None:
        raise ValueError(f"unknown operator {name!r}; available: {', '.join(specs())}")
    return found

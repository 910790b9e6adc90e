"""Cases at a program's own shapes: the calls tileport's operators receive while some code runs (``record``),
written as case files ``tileport verify OP --cases FILE`` runs (``write``), as msprobe replays a real run's API
inputs.

``record`` sees every kernel call through the registry (the forward's tensors and attributes, in the
declaration's order: inputs, then attributes) and every call of a composed operator's public function (its
arguments bound to the declaration by name). ``write`` takes the operator's own suite, keeps its standard and
value rules, and replaces its sizes by the recorded ones (one case per distinct set of sizes, in the recorded
dtype and attribute values; the standard's special scenarios and tileport's extra cases left out).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from .. import ops as ops_pkg
from ..backends.registry import REGISTRY
from ..dtypes import name as dtype_name
from ..ops import dims as d
from ..ops.catalog import specs
from .schema import SUITES


@dataclass(frozen=True)
class Call:
    """One forward call: the operator, its dtype, the sizes of its named dimensions (row-wise operators: the
    (rows, D) view the kernel is given), and its attributes' values."""

    op: str
    dtype: torch.dtype
    sizes: tuple[tuple[str, object], ...]
    attrs: tuple[tuple[str, object], ...]
    shape: tuple[int, ...]  # the first floating input's
    absent: tuple[str, ...] = ()  # optional inputs the call left out


@dataclass
class Recording:
    """The calls seen, each once, in the order first seen, with how often each came."""

    calls: dict[Call, int] = field(default_factory=dict)

    def add(self, call: Call) -> None:
        self.calls[call] = self.calls.get(call, 0) + 1


def _plain(v: object) -> object:
    """An attribute as a case file writes it (dtypes by name, tuples as lists)."""
    if isinstance(v, torch.dtype):
        return dtype_name(v)
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def _call(spec, values: dict[str, object]) -> Call | None:
    """The call of ``spec`` with these argument values by name (None where its tensors do not bind)."""
    decl = spec.declaration
    tensors = {t.name: values.get(t.name) for t in decl.inputs}
    attrs = {a.name: values[a.name] for a in spec.attrs if a.name in values}
    floating = next((t for t in tensors.values() if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
    if floating is None:
        return None
    try:
        sizes = d.bind(decl, {k: v for k, v in tensors.items() if v is not None}, attrs).sizes
    except (ValueError, TypeError, IndexError):
        return None
    plain = tuple((k, tuple(v) if isinstance(v, (tuple, list)) else int(v)) for k, v in sizes.items())
    absent = tuple(k for k, v in tensors.items() if v is None)
    return Call(
        spec.name, floating.dtype, plain, tuple((k, _plain(v)) for k, v in attrs.items()), tuple(floating.shape), absent
    )


class _Recorded:
    """An implementation module whose ``forward`` is recorded before it runs."""

    def __init__(self, impl, spec, recording: Recording):
        self._impl, self._spec, self._rec = impl, spec, recording

    def __getattr__(self, name):
        got = getattr(self._impl, name)
        if name != "forward":
            return got
        spec, rec = self._spec, self._rec
        names = [t.name for t in spec.declaration.inputs] + [a.name for a in spec.attrs]

        def forward(*args, **kwargs):
            call = _call(spec, {**dict(zip(names, args)), **kwargs})
            if call is not None:
                rec.add(call)
            return got(*args, **kwargs)

        return forward


def _public(spec, fn, recording: Recording):
    sig = inspect.signature(fn)

    def recorded(*args, **kwargs):
        try:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            call = _call(spec, dict(bound.arguments))
        except TypeError:
            call = None  # the function itself will say what is wrong
        if call is not None:
            recording.add(call)
        return fn(*args, **kwargs)

    return recorded


@contextlib.contextmanager
def record() -> Iterator[Recording]:
    """Record the forward calls tileport's operators get inside the block (eager calls: under torch.compile
    the kernels run where the graph does, and are recorded too). The registry and ``tileport.ops`` are as they
    were afterwards."""
    recording = Recording()
    all_specs = specs()
    original = REGISTRY.kernels

    def kernels(op, *args, **kwargs):
        impl = original(op, *args, **kwargs)
        return _Recorded(impl, all_specs[op], recording) if op in all_specs else impl

    composed = {n: s for n, s in all_specs.items() if s.composes and hasattr(ops_pkg, n)}
    saved = {n: getattr(ops_pkg, n) for n in composed}
    REGISTRY.kernels = kernels
    try:
        for n, s in composed.items():
            setattr(ops_pkg, n, _public(s, saved[n], recording))
        yield recording
    finally:
        del REGISTRY.kernels  # the class's method again
        for n, fn in saved.items():
            setattr(ops_pkg, n, fn)


def _suite_data(op: str) -> dict:
    path = SUITES / f"{op}.yaml"
    if not path.exists():
        raise ValueError(f"{op}: no suite to take the rules from ({path})")
    return yaml.safe_load(path.read_text())


def _case_file(op: str, calls: list[Call]) -> dict:
    """``op``'s suite with its sizes replaced by ``calls``' (one attribute set: the first call's)."""
    data = _suite_data(op)
    dtypes = list(dict.fromkeys(dtype_name(c.dtype) for c in calls))
    sizes = list(dict.fromkeys(c.sizes for c in calls))
    shapes = list(dict.fromkeys(c.shape for c in calls))
    inputs = data["inputs"]
    primary = next(i for i in inputs if i.get("type") == "tensor")
    primary["dtypes"] = {"values": dtypes}
    for flag in list(primary.get("boundary", {})):
        primary["boundary"][flag] = False  # the model's shapes only: no special scenarios
    attrs = dict(calls[0].attrs)
    for entry in inputs:
        if entry.get("type") == "attrs" and entry["name"] in attrs:
            entry["values"] = [attrs[entry["name"]]]
    if "dims" in data:  # a suite by named dimensions: an input every call left out is left out of every case
        absent = set.intersection(*(set(c.absent) for c in calls))
        for entry in inputs:
            if entry["name"] in absent:
                entry["omit"] = 1
        data["fixed"] = [{k: list(v) if isinstance(v, tuple) else v for k, v in s} for s in sizes]
    else:  # a row-wise suite: the kernel's (rows, D) views
        primary.setdefault("shapes", {})["fixed"] = [list(s) for s in shapes]
        data["extra_share"] = 0
        sizes = shapes
    for level in data["levels"].values():
        level["cases"] = len(sizes) * len(dtypes)  # the fixed cases once per dtype, nothing drawn
    return data


def write(recording: Recording, out: Path, source: str) -> list[Path]:
    """One case file per operator and attribute set, ``out/<op>.yaml`` (``<op>-2.yaml``... for further attribute
    sets); returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple[str, tuple], list[Call]] = {}
    for call in recording.calls:
        groups.setdefault((call.op, call.attrs), []).append(call)
    written, seen = [], {}
    for (op, _), calls in groups.items():
        seen[op] = seen.get(op, 0) + 1
        path = out / (f"{op}.yaml" if seen[op] == 1 else f"{op}-{seen[op]}.yaml")
        counts = ", ".join(f"{'x'.join(map(str, c.shape))} x{recording.calls[c]}" for c in calls)
        head = (
            f"# {op}'s cases at the shapes {source} gave it (first input's shape x calls: {counts}).\n"
            f"# Run: tileport verify {op} --cases {path.name}\n"
        )
        path.write_text(
            head + yaml.safe_dump(_case_file(op, calls), sort_keys=False, width=120, default_flow_style=None)
        )
        written.append(path)
    return written

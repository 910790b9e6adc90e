"""geglu's spec: gate and up of one shape (any, 0-d included) by named dimensions, and what the generic layers
(verify, bench, cases, docs, lower) read about it. Also the pieces both gated activations share (example,
bytes moved, workloads, bar), which swiglu's spec imports."""

from __future__ import annotations

import torch

from .. import spec as s

CASTINGS = ("fp32", "eager")
APPROXIMATE = s.Attr("approximate", "tanh", "none (erf) or tanh", s.CHOICE, ("none", "tanh"), kw_only=False)
CASTING = s.Attr(
    "casting", "fp32", "fp32 (math in fp32, rounded once) or eager (the activation rounded first)", s.CHOICE, CASTINGS
)


def composite(gate, up, approximate="tanh", casting="fp32"):
    """What users write today: Gemma's eager ``gelu(gate_proj(x), approximate) * up_proj(x)`` (eager), or the
    same math in fp32 rounded once."""
    gelu = torch.nn.functional.gelu
    if casting == "eager":
        return gelu(gate, approximate=approximate) * up
    return (gelu(gate.float(), approximate=approximate) * up.float()).to(gate.dtype)


def example(shape, dtype, device, generator) -> dict:
    """gate and up of ``shape`` (tokens, F): normal activations of an MLP's projections."""
    gate = torch.randn(tuple(shape), generator=generator).to(dtype).to(device)
    return {"gate": gate, "up": torch.randn(tuple(shape), generator=generator).to(dtype).to(device)}


def bytes_moved(shape, dtype, mode: str) -> int:
    """fwd reads gate and up and writes y; bwd reads dy, gate, up and writes dgate, dup."""
    n = 1
    for size in shape:
        n *= size
    return {"fwd": 3 * n, "bwd": 5 * n, "fwdbwd": 8 * n}[mode] * dtype.itemsize


SMALL = ("16x14336",)  # a decode step of Llama-3-8B's MLP: in cache
IN_CACHE = ("256x4096",)
LARGE = ("4096x14336", "2048x18944")
WORKLOADS = {"llama3-8b-prefill": (4096, 14336), "llama3-8b-decode": (16, 14336), "qwen2.5-7b-prefill": (2048, 18944)}
SWEEP = [(16, 14336), (256, 4096), (1024, 14336), (4096, 14336), (2048, 18944)]

# The gated activations as elementwise operators (issue 39): kernel-only at 0.8 of the copy of their bytes or
# better, in cache and large; against eager (the activation, then the product: 5 passes over the elements where the
# fused forward makes 3, and 14 against 8 forward and backward) and torch.compile (one fused loop, as ours).
_HALF_BYTES_CAUSE = (
    "a 16-bit element halves the bytes, not the work: its widening, the activation's exp and the rounding back make "
    "the kernel instruction-bound where a copy of half the bytes is memory-bound (fp32's rows reach the copy; the "
    "figures: docs/ops/swiglu.md)"
)
_SPLIT_CAUSE = "in cache at 2 threads the split of a call this small costs about as much as its work"
BAR = (
    s.Criterion(
        "fwd in cache: kernel-only share of copy",
        ("fwd",),
        IN_CACHE,
        "bandwidth_share",
        0.8,
        kernel_only=True,
        cause=f"{_HALF_BYTES_CAUSE}; {_SPLIT_CAUSE}",
    ),
    s.Criterion(
        "fwd large: kernel-only share of copy",
        ("fwd",),
        LARGE,
        "bandwidth_share",
        0.8,
        kernel_only=True,
        cause=_HALF_BYTES_CAUSE,
    ),
    s.Criterion("fwd vs eager", ("fwd",), IN_CACHE + LARGE, "speedup_vs_eager", 1.5),
    s.Criterion("fwd vs torch.compile", ("fwd",), IN_CACHE + LARGE, "speedup_vs_compile", 1.0),
    s.Criterion("fwdbwd vs eager autograd", ("fwdbwd",), IN_CACHE + LARGE, "speedup_vs_eager", 1.5),
    s.Criterion("fwdbwd vs torch.compile", ("fwdbwd",), IN_CACHE + LARGE, "speedup_vs_compile", 1.0),
)


# geglu's own: the tanh gelu's work per element, which keeps fp32 below the copy on some CPUs too
_TANH_CAUSE = (
    "fp32 too on some CPUs: the tanh gelu takes 41 instructions per 16 fp32 lanes (its cubic, the exp, a division, "
    "the sign's select; swiglu's silu 29), 0.46-0.78 of the copy at 1 thread on an AMD EPYC (Zen 4) across three "
    "runs, 0.90-1.05 on an Intel Xeon"
)
_CAUSES = {"fwd in cache: kernel-only share of copy": _TANH_CAUSE, "fwd large: kernel-only share of copy": _TANH_CAUSE}


def _liger(fn):
    """Liger's GEGLU in the spec's convention: the tanh gelu, rounded to the dtype before the product (eager)."""

    def call(gate, up, approximate="tanh", casting="eager"):
        if (approximate, casting) != ("tanh", "eager"):
            raise ValueError("Liger's GEGLU has one form: approximate='tanh', casting='eager'")
        return fn(gate, up)

    return call


SPEC = s.OpSpec(
    name="geglu",
    aliases=("GELUMul", "LigerGELUMulFunction", "geglu_fwd"),
    summary="the GEGLU gate of an MLP: gelu(gate, approximate) * up",
    math="gelu(gate) * up, gelu(v) = v / 2 * erfc(-v / sqrt 2) (none) or "
    "v * sigmoid(2 * sqrt(2/pi) * (v + 0.044715 v^3)) (tanh)",
    inputs=("gate: [*] float grad", "up: [*] like:gate grad"),
    attrs=(APPROXIMATE, CASTING),
    outputs=("y: [*] like:gate",),
    grads=("dgate: [*] like:gate", "dup: [*] like:gate"),
    unit_stride=True,
    backward=s.Backward(("dy", "gate", "up"), ("approximate", "casting")),
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    dtypes=s.FLOATS,
    workloads=WORKLOADS,
    sweep=SWEEP,
    bar=s.with_causes(BAR, _CAUSES),
    kernel_out=True,  # geglu_fwd(out=...): bench's kernel-only provider
    originals=(s.Original("liger", "liger_kernel.ops.geglu", "LigerGELUMulFunction.apply", _liger),),
    usage="""```python
import tileport

y = tileport.geglu(gate, up)                     # gelu(gate, "tanh") * up, any shape; differentiable
y = tileport.geglu(gate, up, "none")             # the erf gelu (computed by erfc: no cancellation)
y = tileport.geglu(gate, up, casting="eager")    # Gemma's gelu(gate) * up rounding (Liger's, vLLM's)
y = tileport.gelu_and_mul(x, approximate="none") # vLLM's form: x [..., 2F] = [gate | up] -> y [..., F]
dgate, dup = tileport.geglu_bwd(dy, gate, up, approximate="tanh")
mlp = tileport.GEGLUMLP(3072, 24576)             # a drop-in for GemmaMLP: load its state dict
```""",
)

"""Whether a user's Triton kernels lower for an Ascend A2/A3 chip, and what to change where they do not
(``tileport lower --impl MODULE:FUNCTION --target ascend-a2``), before anyone has the NPU.

The user's function is called on CPU tensors with the chip stood in for (``standin``: Triton's driver, torch.npu
and torch_npu answer with the chip's properties, so the package imports and takes its NPU path) and every Triton
launch recorded, nothing run (``capture``). Each distinct launch is compiled by triton-ascend (TTIR, Linalg IR;
the NPU binary with CANN) and judged (``check``): the compiler's failure matched against the table of known
causes (``causes``, the one place they are kept), and the limits the compiler does not check without CANN,
checked here (``limits``: the grid against 65535 and the vector cores, the tiles against the unified buffer, the
blocks' tail alignment). ``report`` writes lower.md and lower.json.
"""

from .check import KernelVerdict, Readiness, check  # noqa: F401

"""Two implementations of torch.nn.functional.gelu for the competitor flow (docs/competitor.md): ``original``
stands for the kernel on the competitor's chip (fp32 math, rounded once), ``port`` for its port (the same math,
another order of operations). The exact form is x/2 * erfc(-x/sqrt 2): the textbook 1 + erf(x/sqrt 2) cancels
in fp32 for negative x, which loses to torch's own gelu on CPUs whose vector erf is more accurate (MARE median
ratio 1.56 over 22 seeds on an Intel Xeon, L0 limits: a fail)."""

import torch

SQRT1_2 = 0.7071067811865476
SQRT2_PI = 0.7978845608028654


def original(input, approximate="none"):
    x = input.float()
    if approximate == "tanh":
        return (0.5 * x * (1 + torch.tanh(SQRT2_PI * (x + 0.044715 * x**3)))).to(input.dtype)
    return (0.5 * x * torch.erfc(-x * SQRT1_2)).to(input.dtype)


def port(input, approximate="none"):
    x = input.float()
    if approximate == "tanh":
        inner = SQRT2_PI * x * (1 + 0.044715 * x * x)
        return (x * 0.5 * (torch.tanh(inner) + 1)).to(input.dtype)
    return (x * torch.erfc(x * -SQRT1_2) * 0.5).to(input.dtype)

"""demo_scale's "kernel" on the tilelang backend's CPU slot: the product computed in fp32, rounded once."""


def forward(x, scale, out=None):
    y = (x.float() * scale).to(x.dtype)
    return y if out is None else out.copy_(y)


def backward(dy, scale):
    return (dy.float() * scale).to(dy.dtype)

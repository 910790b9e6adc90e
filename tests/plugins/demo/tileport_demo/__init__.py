"""demo_scale, an operator outside tileport (the plugin surface's test): ``y = x * scale``, ``dx = dy * scale``.
Its interface is derived from its spec by tileport; its kernels are two plain torch modules."""

from .spec import SPEC

demo_scale, demo_scale_fwd, demo_scale_bwd = SPEC.api.function, SPEC.api.forward, SPEC.api.backward
DemoScale = SPEC.api.module("DemoScale")

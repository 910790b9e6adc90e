"""swiglu's and geglu's TileLang CUDA kernels lower here without a device, for every dtype and casting and both
gelu approximations (one kernel per dtype and options: the element count is a runtime value); gelu "none" by
erfcf, never 1 + erf. The Ascend (arch35) modules are not written yet."""

import pytest
import torch

from tileport.backends.registry import REGISTRY

DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@pytest.fixture(scope="module")
def lower():
    if not REGISTRY.availability("tilelang").ok:
        pytest.skip(REGISTRY.availability("tilelang").reason)
    from tileport.backends.tilelang.targets import cuda_target, lower_source

    return lambda f: lower_source(f, cuda_target())


def body(src: str) -> str:
    return src[src.index("__global__") :]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("casting", ["fp32", "eager"])
def test_swiglu_cuda_lowering(lower, dtype, casting):
    from tileport.backends.tilelang.cuda import swiglu

    src = {name: lower(f) for name, f in swiglu.lowered(dtype, 128, casting=casting).items()}
    assert set(src) == {"swiglu_fwd", "swiglu_bwd"}
    for name, s in src.items():
        assert f"{name}_kernel(" in s and "int N" in s and "expf" in body(s)
    assert swiglu.lowered(dtype, 4096, casting=casting)["swiglu_fwd"].script() == swiglu.lowered(
        dtype, 128, casting=casting)["swiglu_fwd"].script()  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_geglu_cuda_lowering(lower, dtype, approximate):
    from tileport.backends.tilelang.cuda import geglu

    src = {name: body(lower(f)) for name, f in geglu.lowered(dtype, 128, approximate=approximate).items()}
    assert set(src) == {"geglu_fwd", "geglu_bwd"}
    for s in src.values():
        assert ("erfcf" in s) == (approximate == "none") and "erff(" not in s and "tanhf" not in s


def test_geglu_cuda_rejects_an_unknown_approximation(lower):
    from tileport.backends.tilelang.cuda import geglu

    with pytest.raises(ValueError, match="approximate"):
        geglu.lowered(torch.float16, 128, approximate="erf")

"""swiglu's and geglu's TileLang CUDA kernels lower here without a device, for every dtype and casting and both
gelu approximations (one kernel per dtype and options: the element count is a runtime value); gelu "none" by
erfcf, never 1 + erf. The Ascend (arch35) kernels lower too (slow, as rope's Ascend lowering): SIMT sub-kernels
between GM <-> UB copies, within the UB budget (two stages of UB_BUDGET), free of ThreadSync race warnings; gelu
"none" by the erfc fit (the dialect has no erfc), never the dialect's erf."""

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
    assert (
        swiglu.lowered(dtype, 4096, casting=casting)["swiglu_fwd"].script()
        == swiglu.lowered(dtype, 128, casting=casting)["swiglu_fwd"].script()
    )


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


# Ascend arch35: every dtype across the two ops, both castings and gelu approximations, without the full product.
ASCEND_CASES = [
    ("swiglu", torch.float16, {"casting": "fp32"}),
    ("swiglu", torch.float32, {"casting": "eager"}),
    ("geglu", torch.bfloat16, {"approximate": "none", "casting": "eager"}),
    ("geglu", torch.float32, {"approximate": "none"}),
    ("geglu", torch.float16, {"approximate": "tanh"}),
]


@pytest.fixture(scope="module")
def backend():
    if not REGISTRY.availability("tilelang").ok:
        pytest.skip(REGISTRY.availability("tilelang").reason)
    return REGISTRY.load("tilelang")


@pytest.mark.slow
@pytest.mark.parametrize("op,dtype,options", ASCEND_CASES, ids=lambda v: str(v))
def test_ascend_lowering(backend, op, dtype, options, capfd):
    from tileport.backends.tilelang.ascend._common import UB_BUDGET
    from tileport.backends.tilelang.targets import ON_CHIP_BUDGET

    kernels = backend.device_kernels(op, "ascend", dtype, 128, **options)
    out, err = capfd.readouterr()
    assert "ThreadSync" not in out + err, "lowering reports a data race: " + (out + err)[-400:]
    assert set(kernels) == {f"{op}_fwd", f"{op}_bwd"}
    for name, (s, used) in kernels.items():
        assert f"{name}_kernel(" in s and "int32_t N)" in s  # one kernel for any element count
        assert "asc_copy_gm2ub_align" in s and "asc_copy_ub2gm_align" in s and "asc_vf_call" in s  # GM <-> UB, SIMT
        assert "expf" in s and "erf" not in s  # gelu "none" by the erfc fit, never 1 + erf
        assert 0 < used <= min(2 * UB_BUDGET, ON_CHIP_BUDGET["ascend"]), f"{name}: {used} B"
    # the element count is a runtime value: one kernel whatever dim
    module = backend.kernels(op, "npu-arch35")
    assert (
        module.lowered(dtype, 4096, **options)[f"{op}_fwd"].script()
        == module.lowered(dtype, 128, **options)[f"{op}_fwd"].script()
    )


def test_ascend_modules_follow_the_cuda_contract(backend):
    import inspect

    from tileport.backends.tilelang.ascend import geglu, swiglu
    from tileport.backends.tilelang.cuda import geglu as cuda_geglu
    from tileport.backends.tilelang.cuda import swiglu as cuda_swiglu

    for ascend, cuda in ((swiglu, cuda_swiglu), (geglu, cuda_geglu)):
        for fn in ("lowered", "forward", "backward"):
            assert inspect.signature(getattr(ascend, fn)) == inspect.signature(getattr(cuda, fn)), fn
    with pytest.raises(ValueError, match="approximate"):
        geglu.lowered(torch.float16, 128, approximate="erf")

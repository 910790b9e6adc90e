"""The doctor's checks: each reads the machine through a ``Probe`` and returns a finding with its fix.

Status: ``ok``; ``warn`` (works here, breaks a path a user may take, e.g. the tilelang-ascend wheels);
``fail`` (the default CPU backend cannot run: the doctor exits non-zero); ``info`` (not present, not needed
on this machine, e.g. no NPU).
"""

from __future__ import annotations

import importlib
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..backends import platform
from ..backends.registry import kernel_modules
from ..backends.tilelang import _CPU_SUPPORT, cpu
from ..backends.tilelang.cpu.settings import COMPILE_FLAGS, cache_dir
from ..ops.catalog import get
from .probe import Probe

TILELANG_RANGE = ((0, 1, 15), (0, 2, 0))
GLIBC_ASCEND = (2, 38)
GLIBCXX_NEEDED = "GLIBCXX_3.4.32"


@dataclass(frozen=True)
class Finding:
    check: str
    status: str  # ok | warn | fail | info
    detail: str
    fix: str = ""


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for p in text.split("+")[0].split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def python(p: Probe) -> Finding:
    v = ".".join(map(str, p.python_version))
    if tuple(p.python_version[:2]) < (3, 10):
        return Finding("python", "fail", f"Python {v}", "tileport needs Python >= 3.10")
    return Finding("python", "ok", f"Python {v}")


def python_headers(p: Probe) -> Finding:
    h = p.python_include / "Python.h"
    if h.exists():
        return Finding("Python.h", "ok", str(h))
    return Finding(
        "Python.h",
        "fail",
        f"no {h}: TileLang builds its Cython wrapper against it",
        "install the headers: apt install python3-dev, or dnf install python3-devel",
    )


def torch_build(p: Probe) -> Finding:
    try:
        torch = p.import_module("torch")
    except Exception as exc:
        return Finding("torch", "fail", f"import torch failed: {exc}", "pip install torch==2.13.0 (the CPU wheel here)")
    cuda = getattr(torch.version, "cuda", None)
    return Finding("torch", "ok", f"torch {torch.__version__} ({'CUDA ' + cuda if cuda else 'CPU'} build)")


def tilelang(p: Probe) -> Finding:
    fix = 'pip install "tilelang>=0.1.15,<0.2"'
    try:
        tl = p.import_module("tilelang")
    except Exception as exc:
        return Finding("tilelang", "fail", f"import tilelang failed: {type(exc).__name__}: {exc}", fix)
    v = _version(tl.__version__)
    lo, hi = TILELANG_RANGE
    if not lo <= v < hi:
        return Finding(
            "tilelang", "fail", f"tilelang {tl.__version__}: the CPU runtime is written for 0.1.15+ < 0.2", fix
        )
    return Finding("tilelang", "ok", f"tilelang {tl.__version__}")


def compiler(p: Probe) -> Finding:
    cxx = p.environ.get("CXX", "g++")
    path = p.which(cxx)
    if path is None:
        return Finding(
            "C++ compiler",
            "fail",
            f"{cxx!r} not on PATH: TileLang's C target builds every CPU kernel with it",
            "install g++ (apt install g++, dnf install gcc-c++) or set CXX",
        )
    out = p.run([cxx, "--version"]) or ""
    return Finding("C++ compiler", "ok", f"{path}: {out.splitlines()[0] if out else 'version unknown'}")


def openmp(p: Probe) -> Finding:
    """Compile and run a tiny OpenMP program with the CPU kernels' flags."""

    cxx = p.environ.get("CXX", "g++")
    if p.which(cxx) is None:
        return Finding("OpenMP and flags", "fail", "no compiler (see above)", "install g++")
    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "omp.cpp", Path(d) / "omp"
        src.write_text(
            "#include <omp.h>\n#include <cstdio>\nint main(){int n=0;\n#pragma omp parallel reduction(+:n)\nn+=1;"
            'std::printf("%d", n);return n>0?0:1;}\n'
        )
        built = p.run([cxx, *COMPILE_FLAGS, str(src), "-o", str(exe)])
        ran = p.run([str(exe)]) if built is not None else None
    flags = " ".join(COMPILE_FLAGS)
    if built is None:
        return Finding(
            "OpenMP and flags",
            "fail",
            f"{cxx} {flags} failed on a tiny OpenMP program",
            "install libgomp (gcc's OpenMP)",
        )
    if ran is None:
        return Finding(
            "OpenMP and flags", "fail", "the tiny OpenMP program built but did not run", "check libgomp.so is loadable"
        )
    return Finding("OpenMP and flags", "ok", f"{flags}: built and ran ({ran.strip()} threads)")


def shared_cores(p: Probe) -> Finding:
    """How torch's own OpenMP threads wait: spinning (the default) holds a core after each of torch's parallel
    ops, which on a machine shared with other processes makes torch's ops many times slower; tileport's CPU
    kernels share those threads but back off to one thread by themselves (``threads.h``)."""
    name = "threads on a shared machine"
    policy = p.environ.get("OMP_WAIT_POLICY", "")
    if policy.lower() == "passive":
        return Finding(name, "ok", "OMP_WAIT_POLICY=passive: torch's OpenMP threads sleep when idle")
    return Finding(
        name,
        "info",
        f"OMP_WAIT_POLICY={policy or 'unset'}: torch's own OpenMP threads spin after each parallel "
        "op (tileport's kernels back off by themselves)",
        "where other processes share the cores: export OMP_WAIT_POLICY=passive before Python starts",
    )


def _probe_op() -> str:
    """The first operator (by name) whose TileLang CPU kernels state packed loops to check: the doctor's probe,
    found through the specs and kernel modules (a generic layer names no operator)."""
    for module in sorted(kernel_modules(cpu.__file__, _CPU_SUPPORT)):
        if getattr(importlib.import_module(f"{cpu.__name__}.{module}"), "PACKED_CHECKS", ()):
            return module
    raise LookupError("no TileLang CPU kernel module states packed loops to check")


def cpu_kernel(p: Probe) -> Finding:
    """Build (or load from the cache) and run the probe operator's CPU kernels on a tiny input, against torch."""
    try:
        op = _probe_op()
        spec = get(op)
        inputs = spec.example((4, 8), torch.float32, "cpu", torch.Generator().manual_seed(0))
        ours, theirs = spec.run(inputs, "tilelang", False), spec.run(inputs, "torch", False)
        err = max(float((ours[k].double() - theirs[k].double()).abs().max()) for k in ours if ours[k] is not None)
    except Exception as exc:
        return Finding(
            "TileLang CPU kernel", "fail", f"{type(exc).__name__}: {exc}", "fix the findings above, then rerun"
        )
    if not err < 1e-5:
        return Finding("TileLang CPU kernel", "fail", f"ran, but differs from torch by {err:g}", "report this as a bug")
    return Finding("TileLang CPU kernel", "ok", f"{op} 4x8 ran, max |diff| vs torch {err:.1e}")


def cpu_simd(p: Probe) -> Finding:
    """The ISA the CPU kernels are built for, and whether the probe operator's first built kernel's loops are
    packed SIMD."""
    try:
        from ..backends.tilelang.cpu import disasm, runtime, settings  # tilelang: kept out of start-up

        isa = settings.isa(p.environ)
        if p.machine not in ("x86_64", "AMD64"):
            return Finding("CPU kernels' SIMD", "info", f"{isa.summary()}: the disassembly check reads x86 only")
        if p.which("objdump") is None:
            return Finding("CPU kernels' SIMD", "info", f"{isa.summary()}; not checked", "install binutils (objdump)")
        name, build = importlib.import_module(f"{cpu.__name__}.{_probe_op()}").PACKED_CHECKS[0]
        # TileLang's loggers note that the run check's build is in its cache (on stdout, in --json's way)
        quiet = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict) if n.startswith("tilelang")]
        levels = [q.level for q in quiet]
        for q in quiet:
            q.setLevel(logging.ERROR)
        try:
            lib = runtime.compile_kernel(build(torch.float32)).lib._name
        finally:
            for q, level in zip(quiet, levels):
                q.setLevel(level)
        problems = disasm.unpacked(disasm.kernel_loops(lib, name), disasm.register_of(isa.lanes))
    except Exception as exc:
        return Finding(
            "CPU kernels' SIMD", "fail", f"{type(exc).__name__}: {exc}", "fix the findings above, then rerun"
        )
    if problems:
        return Finding(
            "CPU kernels' SIMD",
            "fail",
            f"{isa.summary()}: {'; '.join(problems)}",
            "report this as a bug (tileport doctor --json)",
        )
    return Finding("CPU kernels' SIMD", "ok", f"{isa.summary()}: {name}'s loops are packed")


def glibc(p: Probe) -> Finding:
    v = p.glibc()
    if v is None:
        return Finding("glibc", "info", "not glibc (or unknown): the tilelang-ascend wheels need glibc >= 2.38")
    if _version(v) < GLIBC_ASCEND:
        return Finding(
            "glibc",
            "warn",
            f"glibc {v}: fine here, too old for the tilelang-ascend wheels (need >= 2.38)",
            "for Ascend A2/A3 use an image with glibc >= 2.38 (Ubuntu 24.04, openEuler 24.03)",
        )
    return Finding("glibc", "ok", f"glibc {v}")


def glibcxx(p: Probe) -> Finding:
    path = p.libstdcxx()
    versions = p.glibcxx_versions(path)
    if path is None:
        return Finding("libstdc++", "warn", "libstdc++.so.6 not found", "install libstdc++ (gcc)")
    if GLIBCXX_NEEDED not in versions:
        newest = max(versions, key=lambda s: int(s.rsplit(".", 1)[1]), default="none")
        return Finding(
            "libstdc++",
            "warn",
            f"{path} has no {GLIBCXX_NEEDED} (newest {newest}): the tilelang-ascend wheels need it",
            "gcc-toolset-13 (or conda's libstdcxx-ng >= 13) and put its lib64 first in LD_LIBRARY_PATH",
        )
    return Finding("libstdc++", "ok", f"{path} has {GLIBCXX_NEEDED}")


def nvcc(p: Probe) -> Finding:
    path = p.which("nvcc")
    if path is None:
        return Finding(
            "nvcc", "info", "not found: `tileport lower --target cuda` stops at CUDA source", "install the CUDA toolkit"
        )
    out = p.run([path, "--version"]) or ""
    release = next((line.strip() for line in out.splitlines() if "release" in line), "version unknown")
    return Finding("nvcc", "ok", f"{path}: {release}")


def cuda_devices(p: Probe) -> Finding:
    try:
        torch = p.import_module("torch")
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as exc:
        return Finding("CUDA devices", "info", f"cannot ask torch: {exc}")
    if n == 0:
        return Finding("CUDA devices", "info", "none: CUDA kernels are lowered and compiled, not run")
    names = ", ".join(
        f"{torch.cuda.get_device_name(i)} (sm_{''.join(map(str, torch.cuda.get_device_capability(i)))})"
        for i in range(n)
    )
    return Finding("CUDA devices", "ok", names)


def npu(p: Probe) -> Finding:

    if not p.can_import("torch_npu"):
        return Finding("torch_npu and NPUs", "info", "torch_npu not installed: no Ascend NPU path on this machine")
    try:
        torch_npu = p.import_module("torch_npu")
        n = torch_npu.npu.device_count()
        names = [torch_npu.npu.get_device_name(i) for i in range(n)]
    except Exception as exc:
        return Finding(
            "torch_npu and NPUs",
            "warn",
            f"torch_npu is installed but fails: {type(exc).__name__}: {exc}",
            "source CANN's set_env.sh (source /usr/local/Ascend/ascend-toolkit/set_env.sh) before Python",
        )
    if not names:
        return Finding("torch_npu and NPUs", "info", "torch_npu imports, no NPU visible")

    def kind(name: str) -> str | None:
        try:
            return platform.npu_kind(name)
        except ValueError:  # an Ascend 310 or a future chip: reported, not a failed check
            return None

    kinds = {n: kind(n) for n in names}
    detail = ", ".join(
        f"{n} ({k or 'unsupported architecture: served by the torch backend only'})" for n, k in kinds.items()
    )
    if any(k is None for k in kinds.values()):
        return Finding(
            "torch_npu and NPUs",
            "warn",
            detail,
            "tileport's NPU kernels need an arch35 (Ascend 950) or arch32 (910B/910_93) device",
        )
    return Finding("torch_npu and NPUs", "ok", detail)


def cann(p: Probe) -> Finding:
    home = p.environ.get("ASCEND_HOME_PATH") or p.environ.get("ASCEND_TOOLKIT_HOME")
    bisheng = p.which("bisheng")
    if bisheng:
        return Finding("CANN and bisheng", "ok", f"bisheng {bisheng}" + (f", CANN {home}" if home else ""))
    if home:
        return Finding(
            "CANN and bisheng", "warn", f"CANN at {home} but bisheng not on PATH", "source CANN's set_env.sh"
        )
    return Finding("CANN and bisheng", "info", "not found: `tileport lower --target ascend` stops at Ascend C source")


def triton_ascend(p: Probe) -> Finding:
    """Which Triton is installed (upstream or triton-ascend) and what an A2/A3 (arch32) device run still needs."""
    asc, upstream = p.dist_version("triton-ascend"), p.dist_version("triton")
    env = "python3 -m venv .venv-ascend && . .venv-ascend/bin/activate && pip install torch==2.13.0 'tileport[ascend]'"
    if asc is None:
        which = f"upstream triton {upstream}" if upstream else "no triton"
        return Finding(
            "Triton for Ascend A2/A3",
            "info",
            f"{which}: A2/A3 (arch32) NPUs get the torch backend here; their Triton path is "
            "triton-ascend, which replaces upstream triton (an environment of its own), and `tileport lower --impl` "
            "(whether your kernels lower for A2/A3) runs there",
            env,
        )
    home = p.environ.get("ASCEND_HOME_PATH")
    bishengir = p.which("bishengir-compile") or (
        str(Path(home) / "bin" / "bishengir-compile")
        if home and (Path(home) / "bin" / "bishengir-compile").is_file()
        else None
    )
    missing = []
    if not p.can_import("pybind11"):
        missing.append("pybind11 (triton-ascend's import needs it: pip install pybind11)")
    if bishengir is None:
        missing.append("CANN's bishengir-compile (source <ascend-toolkit>/set_env.sh): lowering stops at the Linalg IR")
    if not p.can_import("torch_npu"):
        missing.append("torch_npu matching this torch: no device runs")
    detail = (
        f"triton-ascend {asc}: A2/A3 (arch32) run tileport's Triton kernels, and `tileport lower --impl` judges yours"
        + (f"; bishengir-compile {bishengir}" if bishengir else "")
    )
    if missing:
        return Finding(
            "Triton for Ascend A2/A3",
            "warn",
            detail + "; missing for a device run: " + "; ".join(missing),
            "on the NPU host: source set_env.sh, install torch_npu for this torch",
        )
    return Finding("Triton for Ascend A2/A3", "ok", detail)


def autoload(p: Probe) -> Finding:
    value = p.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
    if not p.can_import("torch_npu"):
        return Finding("TORCH_DEVICE_BACKEND_AUTOLOAD", "ok", f"{value or 'unset'}; no torch_npu to autoload")
    if value == "0":
        return Finding("TORCH_DEVICE_BACKEND_AUTOLOAD", "ok", "0: import torch does not load torch_npu")
    return Finding(
        "TORCH_DEVICE_BACKEND_AUTOLOAD",
        "warn",
        f"{value or 'unset'}: `import torch` loads torch_npu, which breaks every import when CANN is not set up",
        "export TORCH_DEVICE_BACKEND_AUTOLOAD=0 and import torch_npu explicitly where you use the NPU",
    )


def kernel_cache(p: Probe) -> Finding:

    try:
        version = p.import_module("tilelang").__version__
    except Exception:
        version = "unknown"
    path = cache_dir(version, p.environ)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        return Finding(
            "kernel cache",
            "fail",
            f"{path} is not writable: {exc.strerror or exc}",
            "set TILEPORT_CACHE_DIR to a writable folder",
        )
    return Finding("kernel cache", "ok", f"{path} (one folder per TileLang version, CPU model and target ISA)")


def plugins(p: Probe) -> Finding:
    """Operators from other packages (the ``tileport.ops`` entry points): which load, which do not and why."""
    found, broken = p.plugins()
    if broken:
        listing = "; ".join(f"{entry}: {why}" for entry, why in broken.items())
        return Finding(
            "plugins",
            "warn",
            f"{len(broken)} plugin entr{'y' if len(broken) == 1 else 'ies'} did not load: {listing}",
            "fix or uninstall the package named; tileport's own operators are not affected",
        )
    if not found:
        return Finding("plugins", "info", "no operators from other packages (entry point group tileport.ops)")
    return Finding("plugins", "ok", ", ".join(f"{op} ({pkg})" for op, pkg in found.items()))


CHECKS = (
    python,
    python_headers,
    torch_build,
    tilelang,
    compiler,
    openmp,
    kernel_cache,
    cpu_kernel,
    cpu_simd,
    shared_cores,
    glibc,
    glibcxx,
    nvcc,
    cuda_devices,
    npu,
    cann,
    triton_ascend,
    autoload,
    plugins,
)

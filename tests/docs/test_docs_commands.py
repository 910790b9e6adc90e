"""Every command shown in the README and docs/ runs (tileport commands, with shortened workloads), or names a
file that exists (scripts), and the README's test command is the one .ci/run runs: the docs cannot rot."""

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tileport.backends.triton.ascend import triton_ascend_version
from tileport.cases import load_suite
from tileport.cli import _ray_flag, app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "skills").rglob("*.md"))]


def shell_lines(path: Path) -> list[str]:
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def commands(prefix: str) -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for line in shell_lines(doc):
            for part in re.split(r"\s*&&\s*", line):
                if part.startswith(prefix):
                    out.append((doc.name, part))
    return out


# Shortened workloads: the same command and options, on a small slice so the suite stays fast.
def _quick_run(folder: Path) -> str:
    """A finished quick verify run (of torch's silu) in ``folder``, for the commands that read one."""
    args = ["verify", "--api", "torch.nn.functional.silu", "--level", "quick", "--dtype", "fp32", "--out", str(folder)]
    assert CliRunner().invoke(app, args).exit_code == 0
    return str(folder)


def shortened(args: list[str], tmp: Path) -> list[str]:
    args = [a for a in args]
    for opt in ("--out", "--csv"):
        if opt in args:
            i = args.index(opt)
            del args[i : i + 2]
    name = args[0]
    if name == "compare":  # two runs to compare: quick runs of the same cases, made here
        runs = [_quick_run(tmp / run) for run in args[1:3]]
        return ["compare", *runs, "--out", str(tmp / "c")]
    if name == "report":  # a finished run to render again: a quick run made here
        return ["report", _quick_run(tmp / args[1]), "--out", str(tmp / "r")]
    if "--benchmark-run" in args:  # the benchmark run comes from another machine: tests/verify/test_competitor.py
        i = args.index("--benchmark-run")
        del args[i : i + 2]
    if name == "verify":
        args = [a for a in args]
        if "--level" in args:
            i = args.index("--level")
            del args[i : i + 2]
        own = (
            "--problem" in args
            or "--api" in args
            or ("--cases" in args and load_suite(ROOT / args[args.index("--cases") + 1]).reference)
        )
        backend = [] if own else ["--backend", "tilelang"]  # a reference function is run by itself or by --impl
        return args + ["--level", "quick", "--dtype", "fp32", *backend, "--no-perf", "--out", str(tmp / "v")]
    if name == "bench":
        op = args[1]
        keep = [a for a in args if a in ("bench", op, "--plot")]
        quick = "--shape 33x100 --dtype fp32 --threads 1 --mode fwd --no-compile --budget 0.02".split()
        into = ["--csv", str(tmp / "b.csv"), "--out", str(tmp / "b")]
        if "--plot" in keep:  # needs rows first
            assert CliRunner().invoke(app, ["bench", op, *quick, *into]).exit_code == 0
            return keep + into
        return keep + quick + into
    if name == "cases":
        return args + ["--out", str(tmp / "cases.json")]
    if name == "scaffold":  # writing into the checkout is tests/scaffold/test_scaffold.py's job, in a copy
        return args + ["--dry-run"]
    if name == "lower":
        if "--dim" in args:
            i = args.index("--dim")
            del args[i : i + 2]
        return args + ["--dim", "128", "--out", str(tmp / "l")]
    return args


TILEPORT = commands("tileport ")


def test_the_docs_show_tileport_commands():
    assert {shlex.split(c)[1] for _, c in TILEPORT} >= {"doctor", "verify", "bench", "lower", "scaffold"}


# a command starting a local Ray instance runs in the xdist worker of the Ray tests (one instance at a time)
_PARAMS = [pytest.param(d, c, marks=[pytest.mark.xdist_group("ray")] if "--ray" in c else []) for d, c in TILEPORT]


@pytest.mark.parametrize("doc,command", _PARAMS, ids=[f"{d}:{c}" for d, c in TILEPORT])
def test_tileport_command_runs(doc, command, tmp_path):
    if "--ray" in command:
        pytest.importorskip("ray", reason="--ray needs the tileport[ray] extra")
    args = _ray_flag(shortened(shlex.split(command)[1:], tmp_path))  # as the `tileport` command reads its words
    result = CliRunner().invoke(app, args)
    if (
        "--target" in args
        and args[args.index("--target") + 1].startswith("ascend-")
        and triton_ascend_version() is None
    ):
        # A2/A3 lowering needs triton-ascend (.ci/run's second environment runs it): here, the one clear error
        assert result.exit_code == 2 and "tileport[ascend]" in result.output, f"{doc}: `{command}`:\n{result.output}"
        return
    assert result.exit_code == 0, f"{doc}: `{command}` (run as {args}) failed:\n{result.output}"


@pytest.mark.parametrize(
    "doc,command", commands("bash ") + commands("python scripts/") + commands("python benchmarks/")
)
def test_scripts_named_in_the_docs_exist(doc, command):
    path = ROOT / shlex.split(command)[1]
    assert path.is_file(), f"{doc}: `{command}` names a missing file"


def test_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = [line for line in shell_lines(ROOT / "README.md") if "pytest" in line]
    assert len(readme) == 1
    ci_line = next(line for line in ci.splitlines() if "pytest" in line)
    assert ci_line.strip() in readme[0]

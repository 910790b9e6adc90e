"""The l2norm speed bar (issue 4) judged on a benchmark run's rows: each criterion, measured, target, met."""

from __future__ import annotations

from .run import pivot

IN_CACHE = ("1024x512", "256x4096")
LARGE = ("4096x4096", "16384x4096")
SMALL = ("1x128", "33x100")


def judge_bar(rows: list[dict], backend: str = "tilelang") -> list[dict]:
    eager, comp = pivot(rows, "speedup_vs_eager"), pivot(rows, "speedup_vs_compile")
    share = pivot(rows, "bandwidth_share")
    out = []

    def add(criterion, key, value, target):
        if value is not None:
            out.append(dict(criterion=criterion, mode=key[0], dtype=key[1], shape=key[2], threads=key[3],
                            measured=value, target=target, met=value >= target))  # fmt: skip

    for key in eager:
        mode, dtype, shape, _ = key
        if mode == "fwd" and shape in IN_CACHE:
            add("fwd in-cache vs eager", key, eager[key].get(backend), 1.6 if dtype == "fp32" else 2.0)
            add("fwd in-cache vs torch.compile", key, comp.get(key, {}).get(backend), 1.5)
        if mode == "fwd" and shape in LARGE:
            add("fwd large: kernel-only share of copy bandwidth", key, share.get(key, {}).get(f"{backend}:kernel"), 0.8)
            add("fwd large with allocation vs torch.compile", key, comp.get(key, {}).get(backend), 1.0)
        if mode in ("bwd", "fwdbwd") and shape in IN_CACHE + LARGE:
            add(f"{mode} vs eager autograd", key, eager[key].get(backend), 1.5)
        if mode == "fwd" and shape in SMALL:
            add("fwd small: per call vs eager (>= 1 is no slower)", key, eager[key].get(backend), 1.0)
    return out


def bar_markdown(rows: list[dict], backend: str = "tilelang") -> str:
    judged = judge_bar(rows, backend)
    met = sum(j["met"] for j in judged)
    lines = [f"{met} of {len(judged)} criteria met.", "",
             "| criterion | mode | dtype | shape | threads | measured | target | met |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for j in judged:
        lines.append(f"| {j['criterion']} | {j['mode']} | {j['dtype']} | {j['shape']} | {j['threads']} | "
                     f"{j['measured']:.2f} | {j['target']:g} | {'yes' if j['met'] else '**no**'} |")  # fmt: skip
    return "\n".join(lines) + "\n"

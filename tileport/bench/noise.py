"""Whether a benchmark group's figures can be read as findings: the spread of its rounds and the copy's own
thread scaling, judged from the run's rows. On a shared machine a group whose rounds disagree by 2x, or whose
copy of the same bytes scales impossibly between thread counts, gives ratios that are luck (a kernel at
"874% of copy", "35x torch.compile"); those groups are named as noisy instead of reported as results."""

from __future__ import annotations

SPREAD_LIMIT = 2.0  # a provider's p80 over its min: past it, half the rounds or more ran at under half speed
# the copy's time at 1 thread over its time at t threads, as a multiple of t at the top: in cache a copy may
# scale past t (each core's own cache holds its share: up to 2.7x at 2 threads seen), not past 2 t; at well
# under 1 (0.7) the second thread was kept off its core
SCALING_RANGE = (0.7, 2.0)


def _groups(rows: list[dict], statistic: str) -> dict[tuple, dict[str, float]]:
    out: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if r["statistic"] == statistic:
            key = (r["mode"], r["dtype"], r["shape"], int(r["threads"]))
            out.setdefault(key, {})[r["provider"]] = float(r["value"])
    return out


def noisy_groups(rows: list[dict]) -> dict[tuple, list[str]]:
    """{(mode, dtype, shape, threads): [why]} of every group of ``rows`` whose figures are not findings."""
    mins, p80s = _groups(rows, "min_us"), _groups(rows, "p80_us")
    out: dict[tuple, list[str]] = {}
    for key, provs in mins.items():
        wide = [
            f"{p} {p80s[key][p] / us:.1f}x"
            for p, us in provs.items()
            if us > 0 and p80s.get(key, {}).get(p, 0) / us > SPREAD_LIMIT
        ]
        if wide:
            out.setdefault(key, []).append(f"rounds spread past {SPREAD_LIMIT:g}x (p80/min: {', '.join(wide)})")
        mode, dtype, shape, threads = key
        one = mins.get((mode, dtype, shape, 1), {}).get("copy")
        if threads > 1 and one and provs.get("copy"):
            scaling = one / provs["copy"]
            lo, hi = SCALING_RANGE[0], SCALING_RANGE[1] * threads
            if not lo <= scaling <= hi:
                out.setdefault(key, []).append(
                    f"the copy scales {scaling:.2f}x from 1 to {threads} threads (outside {lo:g}-{hi:g}x)"
                )
    return out


def summary(rows: list[dict], shown: int = 5) -> list[str]:
    """Lines saying which groups were noisy and why (none when every group is readable)."""
    noisy = noisy_groups(rows)
    if not noisy:
        return []
    total = len(_groups(rows, "min_us"))
    lines = [f"noisy: {len(noisy)} of {total} groups; their ratios are not findings (rerun them on a quieter machine):"]
    for (mode, dtype, shape, threads), why in list(noisy.items())[:shown]:
        lines.append(f"  {mode} {dtype} {shape} t{threads}: {'; '.join(why)}")
    if len(noisy) > shown:
        lines.append(f"  ... and {len(noisy) - shown} more")
    return lines

"""Benchmark rows (the long-format CSV schema of ``tileport bench``) as report tables: the one renderer of
timings, used by ``tileport bench``'s markdown, verify's performance section and the speed bar."""

from __future__ import annotations

from .table import Table


def pivot(rows: list[dict], statistic: str) -> dict[tuple, dict[str, float]]:
    """{(mode, dtype, shape, threads): {provider: value}} of one statistic."""
    out: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if r["statistic"] == statistic:
            out.setdefault((r["mode"], r["dtype"], r["shape"], r["threads"]), {})[r["provider"]] = r["value"]
    return out


def _g(v: float | None) -> str:
    return "" if v is None else f"{v:.3g}"


def performance_table(rows: list[dict], title: str = "Performance and memory") -> Table:
    """Per (mode, dtype, shape, threads) and provider: min time, GB/s, share of the copy's bandwidth,
    speed-ups against torch eager and torch.compile, peak allocated bytes."""
    mins, gb, share = pivot(rows, "min_us"), pivot(rows, "gbps"), pivot(rows, "bandwidth_share")
    eager, comp, peak = pivot(rows, "speedup_vs_eager"), pivot(rows, "speedup_vs_compile"), pivot(rows, "peak_bytes")
    resident = pivot(rows, "peak_resident_bytes")
    out = []
    for key, provs in mins.items():
        mode, dtype, shape, threads = key
        for p, us in provs.items():
            bytes_, rss = peak.get(key, {}).get(p), resident.get(key, {}).get(p)
            out.append(
                (
                    mode,
                    dtype,
                    shape,
                    str(threads),
                    p,
                    f"{us:.1f}",
                    f"{gb[key][p]:.1f}",
                    f"{100 * share[key][p]:.0f}%",
                    _g(eager.get(key, {}).get(p)),
                    _g(comp.get(key, {}).get(p)),
                    "" if bytes_ is None else str(int(bytes_)),
                    "" if rss is None else str(int(rss)),
                )
            )
    return Table(
        f"{title} (min over interleaved rounds; copy of the same bytes as the roofline)",
        (
            "mode",
            "dtype",
            "shape",
            "threads",
            "provider",
            "min us",
            "GB/s",
            "of copy",
            "x eager",
            "x compile",
            "peak bytes",
            "peak resident",
        ),
        tuple(out),
        "`:kernel` writes into preallocated outputs (no allocation, no page faults). Peak bytes: the tensors a call "
        "allocates, counted at the dispatcher (torch.compile's generated code allocates unseen there: none given); "
        "peak resident: the rise of the process's resident memory over the call (every provider, whole pages).",
    )


def matmul_table(rows: list[dict]) -> Table | None:
    """A matmul-bound operator's useful matrix-product rate per group and provider, and its share of what
    torch.matmul of the operator's own product sizes reaches in the same rounds (None: no such rows)."""
    rate, share = pivot(rows, "gflops"), pivot(rows, "matmul_share")
    out = []
    for key, provs in rate.items():
        mode, dtype, shape, threads = key
        for p, v in provs.items():
            s = share.get(key, {}).get(p)
            out.append((mode, dtype, shape, str(threads), p, f"{v:.1f}", "" if s is None else f"{100 * s:.0f}%"))
    if not out:
        return None
    return Table(
        "Matrix-product rate (useful flops of the operator's algorithm; matmul: torch.matmul of its product sizes)",
        ("mode", "dtype", "shape", "threads", "provider", "GFLOP/s", "of matmul"),
        tuple(out),
        "The roofline of a matmul-bound operator: its products' flops over its time, against torch.matmul of the same "
        "sizes in the input dtype, timed in the same interleaved rounds.",
    )


def bar_table(judged: list[dict]) -> Table:
    """The speed bar's criteria as judged (``bench.bar.judge_bar``): measured against target, met or not, and
    beside each miss the number of its stated cause, the causes listed once in the note (a miss whose criterion
    states none says so)."""
    met = sum(j["met"] for j in judged)
    causes: list[str] = []
    rows = []
    for j in judged:
        why = ""
        if not j["met"]:
            cause = j.get("cause") or "no cause stated"
            causes += [] if cause in causes else [cause]
            why = f"[{causes.index(cause) + 1}]"
        verdict = ("yes" if j["met"] else "NO") + (" (noisy)" if j.get("noisy") else "")
        rows.append(
            (
                j["criterion"],
                j["provider"],
                j["mode"],
                j["dtype"],
                j["shape"],
                str(j["threads"]),
                f"{j['measured']:.2f}",
                f"{j['target']:g}",
                verdict,
                why,
            )
        )
    noisy = sum(bool(j.get("noisy")) for j in judged)
    note = f"{met} of {len(judged)} criteria met."
    if noisy:
        note += (
            f" {noisy} were measured in noisy groups (rounds spread past 2x, or a copy that scaled impossibly"
            " between thread counts): their figures are not findings; rerun them on a quieter machine."
        )
    if causes:
        note += " Causes of the misses:\n\n" + "\n".join(f"{i}. {c}" for i, c in enumerate(causes, 1))
    return Table(
        "The speed bar",
        ("criterion", "provider", "mode", "dtype", "shape", "threads", "measured", "target", "met", "cause"),
        tuple(rows),
        note,
    )

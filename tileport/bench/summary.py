"""A markdown table of a benchmark run: per (mode, dtype, shape, threads), each provider's min time, GB/s,
share of the copy bandwidth, and speed-ups against torch eager and torch.compile."""

from __future__ import annotations

from .run import pivot


def markdown_table(rows: list[dict]) -> str:
    mins, gb, share = pivot(rows, "min_us"), pivot(rows, "gbps"), pivot(rows, "bandwidth_share")
    eager, comp = pivot(rows, "speedup_vs_eager"), pivot(rows, "speedup_vs_compile")
    out = ["| mode | dtype | shape | threads | provider | min us | GB/s | of copy | x eager | x compile |",
           "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for key, provs in mins.items():
        for p, us in provs.items():
            e = eager.get(key, {}).get(p)
            c = comp.get(key, {}).get(p)
            out.append(
                f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {p} | {us:.1f} | {gb[key][p]:.1f} | "
                f"{100 * share[key][p]:.0f}% | {'' if e is None else f'{e:.2f}'} | {'' if c is None else f'{c:.2f}'} |"
            )
    return "\n".join(out) + "\n"

"""What a patch did: each site replaced (the module or function, the tileport operator it now calls, how) and
each site left as it was, with why; printed by ``tileport patch --dry-run`` and returned by ``tileport.patch``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Site:
    """One place in the model: its dotted path (``model.layers.0.mlp``), the class or function found there, the
    operator it maps to (``rms_norm``...) and, for a replaced site, how; for a site left alone, why."""

    path: str
    found: str
    operator: str
    detail: str


@dataclass
class PatchReport:
    """The sites ``patch`` replaced and those it left, in the model's module order."""

    replaced: list[Site] = field(default_factory=list)
    left: list[Site] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Replaced sites per operator."""
        out: dict[str, int] = {}
        for s in self.replaced:
            out[s.operator] = out.get(s.operator, 0) + 1
        return out

    def table(self) -> str:
        """A plain-text summary: replaced sites grouped by operator and class, then every site left and why."""
        lines = ["replaced:"] if self.replaced else ["replaced: nothing"]
        groups: dict[tuple[str, str, str], int] = {}
        for s in self.replaced:
            key = (s.operator, s.found, s.detail)
            groups[key] = groups.get(key, 0) + 1
        lines += [f"  {op:<28} {n:>3} x {found} ({detail})" for (op, found, detail), n in groups.items()]
        if self.left:
            lines.append("left as they were:")
            lines += [f"  {s.path or '(model)'}: {s.found} [{s.operator}]: {s.detail}" for s in self.left]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

"""What a provider is unless its kind says otherwise: not excused, every output given, timeable."""

from __future__ import annotations

from ..ops.spec import OpSpec


class Defaults:
    excused = False

    def not_judged(self) -> dict[str, str]:
        return {}

    def untimed(self, spec: OpSpec) -> str:
        return ""

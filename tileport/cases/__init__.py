"""Case suites: the YAML format and loader, the seeded generator, and per-operator API adapters."""

from .generate import Case, generate, make_inputs  # noqa: F401
from .schema import CaseFileError, Suite, load_suite  # noqa: F401
from .adapters import adapter_for, golden_inputs  # noqa: F401

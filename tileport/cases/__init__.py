"""Case suites: the YAML format and loader, and the seeded generator. The operator each suite names is run
through its spec (``tileport.ops.spec``): its public API, its inputs' roles."""

from .general import case_at  # noqa: F401
from .generate import Case, generate, golden_inputs, make_inputs, spec_of  # noqa: F401
from .schema import CaseFileError, Suite  # noqa: F401
from .suite_file import load_suite  # noqa: F401

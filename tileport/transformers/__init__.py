"""Model patching: tileport's operators put into a Hugging Face ``transformers`` model in one call, found by the
model's structure (``patch``), and taken out again (``unpatch``). See docs/models.md."""

from .patch import patch, patched, unpatch
from .report import PatchReport, Site

__all__ = ["PatchReport", "Site", "patch", "patched", "unpatch"]

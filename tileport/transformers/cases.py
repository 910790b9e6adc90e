"""Cases from a model: the shapes, dtypes and attributes tileport's operators get in one training step of a
patched transformers model (``capture``), written as case files for ``tileport verify OP --cases``
(``tileport cases --from-model CONFIG``, ``scripts/capture_model_cases.py --shapes CONFIG``)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..cases import capture as _capture
from . import zoo
from .patch import patch, unpatch


def capture(
    config: str,
    out: Path,
    *,
    batch: int = 2,
    seq: int = 64,
    dtype: torch.dtype = torch.bfloat16,
    bench: bool = False,
    seed: int = 0,
) -> list[Path]:
    """One training step (forward with labels, backward) of CONFIG's causal LM, patched, on ``batch x seq``
    random tokens in ``dtype``; each operator's calls written to ``out/<op>.yaml``. ``bench``: a zoo family at
    ``tileport bench --model``'s size. Returns the files written."""
    # transformers: optional (tileport[models]), kept out of start-up
    import transformers

    cfg = zoo.load(config, bench=bench)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(dtype)
    patch(model)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(seed))
    try:
        with _capture.record() as rec:
            model(input_ids=ids, labels=ids).loss.backward()
    finally:
        unpatch(model)  # the model's modeling module as it was now, not when the collector finds the model
    if not rec.calls:
        raise ValueError(f"{config}: a training step of the patched model called no tileport operator")
    source = f"a training step of {type(model).__name__} ({config}, {batch}x{seq} tokens, {str(dtype).split('.')[-1]})"
    return _capture.write(rec, out, source)

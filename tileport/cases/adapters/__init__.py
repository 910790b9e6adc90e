"""Adapters map a case's inputs to an operator's public API (ATK's executor role), one module per operator.

Each module provides ``run(inputs, backend, backward) -> {output name: tensor}`` and
``precision_dtype(output, dtype)``: the dtype whose small-value rule applies to that output.
"""

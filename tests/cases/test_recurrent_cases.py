"""Cases of a recurrent operator's suite (gated DeltaNet's): dimension options that hold only with an optional
input present or absent (a batch of sequences, or one packed row of them), packed sequences' offsets, and floating
inputs brought into their valid domain (a decay <= 0 with exact zeros, a gate in [0, 1], normalized keys unless the
operator normalizes them)."""

import re

import pytest
import torch

from tileport.cases import CaseFileError, generate, load_suite, make_inputs
from tileport.cases.values import offsets

SUITE = load_suite("chunk_gated_delta_rule")


@pytest.fixture(scope="module")
def quick():
    cases = [c for c in generate(SUITE, "L0", dtypes=[torch.float32]) if c.counted][:400]
    return [(c, make_inputs(SUITE, c)) for c in cases]


def test_packed_cases_are_one_row_and_batched_ones_have_a_state_per_sequence(quick):
    packed = [(c, x) for c, x in quick if x["cu_seqlens"] is not None]
    batched = [(c, x) for c, x in quick if x["cu_seqlens"] is None]
    assert 0.25 * len(quick) < len(packed) < 0.55 * len(quick) and batched
    for c, x in packed:
        z = dict(c.sizes)
        cu = x["cu_seqlens"]
        assert z["B"] == 1 and cu.dtype == torch.int64 and cu.numel() == z["N"] + 1, c.describe()
        assert cu[0] == 0 and cu[-1] == z["T"] and bool((cu.diff() >= 1).all()), (c.describe(), cu.tolist())
    assert any((x["cu_seqlens"].diff() == 1).any() for _, x in packed)  # one-token sequences
    assert any(dict(c.sizes)["B"] > 1 for c, _ in batched)
    for c, x in batched:
        z = dict(c.sizes)
        assert z["N"] == z["B"] and (x["initial_state"] is None or x["initial_state"].shape[0] == z["B"])


def test_inputs_lie_in_their_domains(quick):
    g = torch.cat([x["g"].flatten() for _, x in quick])
    beta = torch.cat([x["beta"].flatten() for _, x in quick])
    assert g.max() == 0 and g.min() == -20.0 and 0.05 < (g == 0).float().mean() < 0.5  # exact zeros, the floor
    assert ((g > -20) & (g < -1)).any() and ((g < 0) & (g > -1)).any()
    assert beta.min() >= 0 and beta.max() <= 1 and ((beta > 0.1) & (beta < 0.9)).any()
    for c, x in quick:
        norms = x["k"].double().square().sum(-1).sqrt()
        if c.attrs["use_qk_l2norm_in_kernel"]:
            continue
        assert torch.allclose(norms[norms > 0], torch.ones(()).double(), atol=1e-5), c.describe()
    raw = [x["k"] for c, x in quick if c.attrs["use_qk_l2norm_in_kernel"] and x["k"].numel() > 8]
    assert raw and any(k.square().sum(-1).sqrt().max() > 2 for k in raw)  # left as drawn: the kernel normalizes


def test_offsets_rise_from_zero_to_the_total():
    gen = torch.Generator().manual_seed(0)
    for count, total, least in [(2, 7, 1), (8, 7, 1), (5, 100, 1), (4, 3, 0), (1, 0, 1)]:
        cu = offsets(count, total, least, gen)
        assert cu.numel() == count and cu[0] == 0, cu
        if count > 1:
            assert cu[-1] == total and bool((cu.diff() >= least).all()), (count, total, least, cu.tolist())


@pytest.mark.parametrize(
    "old,new,key,expected",
    [
        ("{range: [1, 4], when: no cu_seqlens}", "{range: [1, 4], when: not cu_seqlens}", "dims.B[0].when",
         "an optional input's name, or 'no NAME'"),
        ("domain: {kind: unit_interval}", "domain: {kind: sigmoid}", "inputs[4].domain.kind", "one of nonpositive"),
        ("zeros: 0.1}", "zeros: 2}", "inputs[3].domain.zeros", "a share from 0 to 1"),
        ("values: {kind: offsets, low: 1, high: T}", "values: {kind: offset, high: T}", "inputs[6].values.kind",
         "one of index, positions, lengths, offsets"),
    ],
)  # fmt: skip
def test_a_malformed_rule_names_the_key(tmp_path, old, new, key, expected):
    text = SUITE.file.read_text()
    assert old in text
    path = tmp_path / "chunk_gated_delta_rule.yaml"
    path.write_text(text.replace(old, new))
    with pytest.raises(CaseFileError, match=re.escape(f"key '{key}': expected {expected}")):
        load_suite(path)

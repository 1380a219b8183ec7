"""Jagged rows: a start loaded from data in an offset index (``values[offsets[b] + l, d]``), a
guarded store (``y[offsets[b] + l, d] = v where l < n``) and an output dimension written as an
expression of sizes (``out y: f32[B1 - 1, D]``). The specs are tritonbench's jagged operators,
checked against torch on each sequence in turn, with empty and one-row sequences, at several
blocks."""

import math
import os

import pytest
import torch

from tests.conftest import config_indices, force_config
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.runner import jagged_offsets

DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"  # the same cases on the GPU


def _jagged(lengths, columns, seed=0):
    """values [sum(lengths), columns] and offsets [len(lengths) + 1] (int64, from 0), on DEVICE."""
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int64)
    values = torch.randn(int(offsets[-1]), columns, generator=generator) * 3
    return values.to(DEVICE), offsets.to(DEVICE)


LENGTHS = [[3, 0, 17, 1, 40, 5], [1], [0, 0, 2], [33, 64, 1, 0, 7]]


def _rows(values, offsets):
    return [values[int(offsets[b]):int(offsets[b + 1])] for b in range(len(offsets) - 1)]


@pytest.mark.parametrize("lengths", LENGTHS)
def test_jagged_sum_and_mean_are_torchs_per_sequence(generated, monkeypatch, lengths):
    values, offsets = _jagged(lengths, 45, seed=len(lengths))
    longest = max(lengths)
    rows = _rows(values, offsets)
    sums = torch.stack([r.sum(0) for r in rows])
    means = torch.stack([r.mean(0) for r in rows])  # an empty sequence's mean is NaN, as torch's
    jagged_sum, jagged_mean = generated("jagged_sum"), generated("jagged_mean")
    for position, index in enumerate(config_indices(jagged_sum)):
        force_config(monkeypatch, jagged_sum, index)
        force_config(monkeypatch, jagged_mean, index)
        bound = longest + 13 * (position % 2)  # L: the longest sequence, or more
        torch.testing.assert_close(jagged_sum.jagged_sum(values, offsets, bound), sums, rtol=1e-5, atol=1e-5)
        got = jagged_mean.jagged_mean(values, offsets, bound)
        torch.testing.assert_close(got, means, rtol=1e-5, atol=1e-5, equal_nan=True)
    torch.testing.assert_close(jagged_sum.reference(values, offsets, longest), sums)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_jagged_softmax_is_torchs_per_sequence(generated, monkeypatch, lengths):
    values, offsets = _jagged(lengths, 21, seed=len(lengths))
    expected = torch.cat([torch.softmax(r, dim=0) for r in _rows(values, offsets)])
    module = generated("jagged_softmax")
    for index in config_indices(module):
        force_config(monkeypatch, module, index)
        got = module.jagged_softmax(values, offsets, max(lengths))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(module.reference(values, offsets, max(lengths)), expected, rtol=1e-5, atol=1e-6)


def test_jagged_softmax_keeps_nan_and_inf_in_their_sequence(generated):
    values, offsets = _jagged([4, 6, 3], 5, seed=2)
    values[1, 0] = float("nan")  # sequence 0, column 0: NaN throughout, as torch's softmax
    values[7, 2] = float("inf")  # sequence 1, column 2
    expected = torch.cat([torch.softmax(r, dim=0) for r in _rows(values, offsets)])
    got = generated("jagged_softmax").jagged_softmax(values, offsets, 6)
    torch.testing.assert_close(got, expected, equal_nan=True)
    assert not got[10:].isnan().any()  # the last sequence is untouched by the others' NaN


def test_jagged_offsets_partition_the_rows_within_the_longest():
    generator = torch.Generator().manual_seed(0)
    for total, rows, longest in ((73, 72, 3), (1000, 10, 150), (5, 9, 1), (0, 4, 3), (10, 1, 10)):
        offsets = jagged_offsets(total, rows, longest, generator)
        lengths = offsets.diff()
        assert offsets[0] == 0 and offsets[-1] == total and len(offsets) == rows + 1
        assert (lengths >= 0).all() and lengths.max() <= max(longest, math.ceil(total / rows))
    with pytest.raises(ValueError):
        jagged_offsets(5, 0, 3, generator)


JAGGED = """\
kernel k
  in  values: f32[T, D]
  in  offsets: i64[B1]
  in  L: i32
  out y: f32[T, D]
  block BD = 16
  grid  b over B1 - 1, d over D by BD, l over L whole
  n = offsets[b + 1] - offsets[b]
  y[offsets[b] + l, d] = values[offsets[b] + l, d] where l < n
"""


def test_a_guarded_store_writes_only_its_lanes(compiled):
    module = compiled(JAGGED)
    values, offsets = _jagged([2, 5, 0, 3], 7)
    out = module.k(values, offsets, 8)  # L past every sequence: the guard keeps the rows apart
    assert torch.equal(out, values)


@pytest.mark.parametrize(
    "change, message",
    [
        (("in  offsets: i64[B1]", "in  offsets: f32[B1]"), "'offsets' in the index of 'values' is f32"),
        (("where l < n", "where n"), "a store's 'where' takes a mask"),
        (("  block BD", "  access block_ptr\n  block BD"), "a store's 'where' masks pointers"),
        (("in  values: f32[T, D]", "in  values: f32[T + 1, D]"), "input 'values' has a dimension written as an "
                                                                  "expression"),
        (("out y: f32[T, D]", "out y: f32[T * Q, D]"), "a dimension of 'y' is arithmetic"),
    ],
)
def test_bad_jagged_forms_are_refused_at_their_place(change, message):
    old, new = change
    assert old in JAGGED
    with pytest.raises(SpecError) as caught:
        compile_spec(JAGGED.replace(old, new), "k.tile")
    rendered = caught.value.render()
    assert message in rendered and rendered.startswith("k.tile:")


def test_a_loaded_offset_varying_within_a_tile_is_refused():
    source = JAGGED.replace("= values[offsets[b] + l, d]", "= values[offsets[l] + l, d]")
    with pytest.raises(SpecError) as caught:
        compile_spec(source, "k.tile")
    assert "spans tile axis 'l'; a loaded offset is one number per program" in caught.value.render()


def test_jagged_rows_get_no_derived_backward():
    """A row read past its sequence's end belongs to the next sequence: a derived backward stored
    zeros there, over the next sequence's gradient. The derivation refuses, naming the read."""
    from tilegen.check import check
    from tilegen.grad import NoBackward, derive_backward
    from tilegen.parser import parse

    source = JAGGED.replace("values[offsets[b] + l, d] where l < n", "exp(values[offsets[b] + l, d]) where l < n")
    with pytest.raises(NoBackward, match="at a start loaded from data"):
        derive_backward(check(parse(source, "k.tile")))

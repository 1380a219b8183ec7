"""Scaled extrema (tilegen/lower/scaled.py): ``max(x * c)`` as ``max(x) * c`` (or ``min(x) * c``
for a negative factor), and the causal loop's masked tiles without a bounds mask where the guard
already excludes the lanes past the end (tilegen/lower/ranges.py)."""

import pytest
import torch

from tilegen import model as m
from tilegen.check import check
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.lower.scaled import Factor, factor_of
from tilegen.parser import parse
from tilegen.runner import load_module

ROW_MAX = """kernel t
  in  x: f32[M, N]
  in  scale: f32
  out y: f32[M]
  block BM = 16, BN = 16
  grid  m over M by BM
  r: f32[m] = -inf
  for n over N by BN
    s = x[m, n] * {factor}
    r = maximum(r, max(s, dim=n))
  y[m] = r
"""


def _module(tmp_path, text, name="t"):
    source = compile_spec(text, f"{name}.tile").source
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return load_module(path), source[source.index(f"def {name}_kernel"):source.index(f"def {name}(")]


def _factor(text):
    spec = check(parse(ROW_MAX.format(factor=text), "t.tile"))
    loop = next(s for s in spec.body if isinstance(s, m.Loop))
    return factor_of(loop.body[0].value.right, spec)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("2.0", Factor(1, None)),
        ("-2.0", Factor(-1, None)),
        ("scale", Factor(1, "scale")),
        ("(-scale * 0.5)", Factor(-1, "scale")),
        ("(scale / 2.0)", Factor(1, "scale")),
        ("(0.5 / scale)", None),  # 1 / -0.0 is -inf: the flag, scale >= 0, would lie
        ("(scale * scale)", None),  # two scalars: the flag would be a product of signs
        ("(scale + 1.0)", None),
        ("N", None),  # a size symbol: an integer, not a float scalar input
    ],
)
def test_the_sign_of_a_factor(text, expected):
    assert _factor(text) == expected


@pytest.mark.parametrize(
    "factor,reduction,flag",
    [("scale", "amax(", True), ("2.0", "amax(", False), ("-2.0", "amin(", False)],
)
def test_the_max_is_taken_before_the_factor_and_matches_torch(tmp_path, factor, reduction, flag):
    module, kernel = _module(tmp_path, ROW_MAX.format(factor=factor))
    assert "s_unscaled = x\n" in kernel and f"max_n = {reduction}" in kernel
    assert ("SCALE_NONNEG" in kernel) is flag  # a numeric factor's sign is known: no flag
    x = torch.randn(37, 53)
    for scale in (0.7, -0.7, 0.0):
        c = scale if factor == "scale" else float(factor)
        torch.testing.assert_close(module.t(x, scale), (x * c).amax(dim=1))


def test_a_local_assigned_twice_is_not_rescaled(tmp_path):
    text = ROW_MAX.format(factor="scale").replace("    r = maximum", "    s = s * 2.0\n    r = maximum")
    module, kernel = _module(tmp_path, text)
    assert "s_unscaled" not in kernel and "SCALE_NONNEG" not in kernel
    x = torch.randn(20, 40)
    torch.testing.assert_close(module.t(x, -0.5), (x * -1.0).amax(dim=1))


CAUSAL_ROWS = """kernel t
  in  x: f32[S, S]
  out y: f32[S]
  block BM = 16, BN = 16
  grid  m over S by BM
  r: f32[m] = 0
  for n over S by BN
    r = r + sum(where(n <= m, x[m, n], 0.0), dim=n)
  y[m] = r
"""


def test_a_guarded_tile_keeps_its_bounds_mask_for_a_plain_load(tmp_path):
    """A load along the loop's axis that is not a dot operand may read anything past S (a masked
    load without a fill): the diagonal tiles keep ``mask_n`` on the sum."""
    module, kernel = _module(tmp_path, CAUSAL_ROWS)
    edge = kernel.split("# tiles where n <= m holds for some lanes")[1]
    assert "mask_n = offs_n < S" in edge and "tl.where(mask_n[None, :]" in edge
    for s in (1, 23, 40):
        x = torch.randn(s, s)
        torch.testing.assert_close(module.t(x), torch.tril(x).sum(dim=1))


def test_integer_tiles_are_not_rescaled(tmp_path):
    """max(x * 2) is not max(x) * 2 when the product wraps around (i32 2**30 * 2 is INT_MIN)."""
    text = ROW_MAX.replace("f32[M, N]", "i32[M, N]").replace("out y: f32[M]", "out y: i32[M]")
    text = text.replace("r: f32[m] = -inf", "r: i32[m] = -2147483648").replace("  in  scale: f32\n", "")
    module, kernel = _module(tmp_path, text.format(factor="2"))
    assert "s_unscaled" not in kernel
    x = torch.tensor([[2**30, 0]], dtype=torch.int32)
    assert module.t(x).tolist() == module.reference(x).tolist()


GUARDED_DOT = """kernel t
  in  q: f32[S, D]
  in  k: f32[S, D]
  in  w: f32[D, E]
  in  v: f32[S, E]
  out o: f32[S, E]
  block BM = 16, BN = 16
  grid  m over S by BM, d over D whole, e over E whole
  acc: f32[m, e] = 0
  for n over S by BN
    acc += dot(where(n <= m, dot(q[m, d], k[n, d], precision=ieee), 0.0), {operand}, precision=ieee)
  o[m, e] = acc
"""


@pytest.mark.parametrize("operand,guarded", [("1.0 / dot(k[n, d], w[d, e], precision=ieee)", False),
                                             ("v[n, e]", True)])
def test_computed_dot_operands_past_the_end_keep_the_bounds_mask(tmp_path, operand, guarded):
    """Past S the loads read zeros, and 1 / dot(0, w) is inf: 0 * inf would be NaN in rows that
    are stored, so the diagonal tiles keep zeroing the lanes past S; a loaded operand (zeros
    there) needs no mask beyond the guard."""
    module, kernel = _module(tmp_path, GUARDED_DOT.format(operand=operand))
    edge = kernel.split("# tiles where n <= m holds for some lanes")[1]
    assert ("tl.where(mask_n" not in edge) is guarded
    g = torch.Generator().manual_seed(0)
    q, k, w, v = (torch.randn(*shape, generator=g) for shape in [(20, 16), (20, 16), (16, 16), (20, 16)])
    out = module.t(q, k, w, v)
    assert not out.isnan().any()
    torch.testing.assert_close(out, module.reference(q, k, w, v), atol=1e-3, rtol=1e-3)


def test_block_pointers_keep_the_bounds_check_on_diagonal_tiles():
    """Block pointers bound-check from the mask the tile's math uses: the causal loop's masked
    tiles still check S on k and v (here a loop over S with 16-row tiles: dimensions (0, 1))."""
    from tests.conftest import ROOT, specs_find

    text = (ROOT / "specs" / "attention_causal.tile").read_text().replace("access descriptor", "access block_ptr")
    source = compile_spec(text, "attention_causal.tile", specs_find).source
    kernel = source[source.index("def attention_causal_kernel"):source.index("def attention_causal(")]
    edge = kernel.split("# tiles where n <= m holds for some lanes")[1]
    assert "lanes past S" not in edge.splitlines()[0]
    assert edge.split("tl.store(")[0].count("boundary_check=(0, 1)") == 2  # k and v


def test_a_max_of_per_tile_minima_is_refused():
    """``acc = maximum(acc, min(s, dim=n))`` takes the largest of the tiles' minima: a result that
    depends on BN (the reference's one minimum over the row differs from it at every block
    size). The checker refuses it at its line; the forms it accepts (``maximum`` with ``max``,
    ``minimum`` with ``min``) combine a guard-false tile (-inf, inf) as their identity, so the
    masked-lane case this test once covered cannot be written any more."""
    text = """kernel t
  in  q: f32[S, D]
  in  k: f32[S, D]
  out o: f32[S]
  block BM = 16, BN = 16
  grid  m over S by BM, d over D whole
  acc: f32[m] = -inf
  for n over S by BN
    s = where(n <= m, dot(q[m, d], k[n, d], precision=ieee), -inf)
    acc = maximum(acc, min(s, dim=n))
  o[m] = acc
"""
    with pytest.raises(SpecError, match=r"t.tile:10:5: error: 'acc' is carried across the steps of the loop"):
        compile_spec(text, "t.tile")

"""Loop ranges (tilegen/lower/ranges.py): full tiles run unmasked, edge tiles masked, and tiles
on the false side of a causal guard skipped only when the body provably changes nothing there.
Interpreter runs at block sizes that put the guard's diagonal in every position in a tile."""

import os

import pytest
import torch
import torch.nn.functional as F
import triton

from tests.conftest import ROOT, specs_find
from tilegen import model as m
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.lower.ranges import find_guard, from_below, skips_when_false
from tilegen.parser import parse
from tilegen.runner import load_module


def _load(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text(compile_spec(source, f"{name}.tile", specs_find).source)
    return load_module(path)


def _kernel_source(source, name):
    text = compile_spec(source, f"{name}.tile", specs_find).source
    return text[text.index(f"def {name}_kernel"):text.index(f"def {name}(")]


def _loop(source):
    spec = parse(source, "t.tile")
    return next(s for s in m.statements(spec.body) if isinstance(s, m.Loop))


ONLINE_SOFTMAX = """kernel t
  in  x: f32[M, N]
  out y: f32[M]
  block BM = 16, BN = 16
  grid  m over M by BM
  m_i: f32[m] = -inf
  l_i: f32[m] = 0
  for n over N by BN
    s = where({cond}, x[m, n], -inf)
    m_new = maximum(m_i, max(s, dim=n))
    l_i = l_i * exp(m_i - m_new) + sum(exp(s - m_new), dim=n)
    m_i = m_new
  y[m] = m_i + log(l_i)
"""


@pytest.mark.parametrize("cond,op", [("n <= m", "<="), ("m >= n", "<="), ("n < m", "<"), ("m > n", "<")])
def test_guard_forms_of_the_lower_triangle(cond, op):
    guard = find_guard(_loop(ONLINE_SOFTMAX.format(cond=cond)), {"m"})
    assert guard is not None and guard.op == op and guard.axis == "m"
    assert skips_when_false(_loop(ONLINE_SOFTMAX.format(cond=cond)), guard, {"m_i", "l_i"})


@pytest.mark.parametrize("cond,op", [("n >= m", ">="), ("m <= n", ">="), ("n > m", ">"), ("m < n", ">")])
def test_guard_forms_that_bound_the_loop_from_below(cond, op):
    guard = find_guard(_loop(ONLINE_SOFTMAX.format(cond=cond)), {"m"})
    assert guard is not None and guard.op == op and guard.axis == "m" and from_below(guard)
    assert skips_when_false(_loop(ONLINE_SOFTMAX.format(cond=cond)), guard, {"m_i", "l_i"})


@pytest.mark.parametrize("cond", ["n == m", "n != m", "n <= 3"])
def test_other_comparisons_are_not_guards(cond):
    assert find_guard(_loop(ONLINE_SOFTMAX.format(cond=cond)), {"m"}) is None


@pytest.mark.parametrize(
    "update",
    [
        "l_i = l_i + sum(where(n <= m, 0.0, 1.0), dim=n)",  # counts the masked lanes: not a no-op
        "l_i = l_i * 2",  # changes every step
        "l_i = maximum(l_i, max(where(n <= m, x[m, n], 0.0), dim=n))",  # a 0 fill is not max's identity
    ],
)
def test_bodies_that_change_state_on_masked_tiles_are_not_skipped(update):
    source = f"""kernel t
  in  x: f32[M, N]
  out y: f32[M]
  block BM = 16, BN = 16
  grid  m over M by BM
  l_i: f32[m] = 0
  for n over N by BN
    s = where(n <= m, x[m, n], -inf)
    {update}
  y[m] = l_i
"""
    loop = _loop(source)
    assert not skips_when_false(loop, find_guard(loop, {"m"}), {"l_i"})
    if update == "l_i = l_i * 2":  # a result that depends on the block size: the checker refuses it
        with pytest.raises(SpecError, match="'l_i' is carried across the steps"):
            _kernel_source(source, "t")
        return
    kernel = _kernel_source(source, "t")
    assert "skipped" not in kernel and "range(min(N // BN, (pid_m * BM + 1) // BN), tl.cdiv(N, BN))" in kernel


def test_a_store_in_the_loop_is_not_skipped():
    source = """kernel t
  in  x: f32[M, N]
  out y: f32[M, N]
  block BM = 16, BN = 16
  grid  m over M by BM
  for n over N by BN
    y[m, n] = where(n <= m, x[m, n], 0.0)
"""
    loop = _loop(source)
    assert not skips_when_false(loop, find_guard(loop, {"m"}), set())


def test_full_tiles_run_without_masks_and_the_edge_with_them():
    kernel = _kernel_source((ROOT / "specs" / "attention_causal.tile").read_text(), "attention_causal")
    full, edge = kernel.split("# tiles where n <= m holds for some lanes")
    full = full[full.index("for n in range(0, min(S // BN, (pid_m * BM + 1) // BN)):"):]
    # (the one where: the running max, 0 while a row has seen only -inf, see test_carried.py)
    guard = 'm_new_or_0 = tl.where(m_new == float("-inf"), 0.0, m_new)\n'
    assert full.count(guard) == 1 and "tl.where" not in full.replace(guard, "")
    assert "mask_n" not in full and "offs_m" not in full
    # no guard: scaled after the max
    assert 's_unscaled = tl.dot(_dot_operand(q), _dot_operand(k), input_precision="ieee")\n' in full
    assert "tl.trans(" not in kernel
    assert "min(tl.cdiv(S, BN), tl.cdiv(pid_m * BM + BM, BN))" in edge  # tiles past the diagonal: skipped
    # the query rows' index values, made where the guard needs them (descriptors take no offsets)
    assert "offs_n[None, :] <= (pid_m * BM + tl.arange(0, BM))[:, None]" in edge
    # lanes past S are past every stored row's diagonal too: descriptors zero-fill them, no mask_n
    assert "mask_n" not in edge and "amax(s, 1)" in edge and "tl.sum(p.to(tl.float32), axis=1)" in edge
    # q is loaded once for both ranges (the descriptor reads zeros past S and D for the dot)
    assert kernel.count("q = q_desc.load(") == 1 and kernel.index("q = q_desc.load(") < kernel.index("for n in")


COUNT = """kernel count_later
  in  x: f32[M, N]
  out y: f32[M]
  out z: f32[M]
  block BM = 16, BN = 16
  grid  m over M by BM
  later: f32[m] = 0
  top: f32[m] = -inf
  for n over N by BN
    later = later + sum(where(n <= m, 0.0, 1.0), dim=n)
  for n over N by BN
    top = maximum(top, max(where(n < m, x[m, n], -inf), dim=n))
  y[m] = later
  z[m] = top
"""


@pytest.mark.parametrize("bm,bn", [(16, 16), (16, 32), (32, 16), (16, 64)])
@pytest.mark.parametrize("rows,cols", [(1, 1), (40, 100), (100, 40), (64, 64)])
def test_guarded_loops_at_every_diagonal_position(tmp_path, bm, bn, rows, cols):
    """``later`` counts keys past the diagonal (its tiles must run); ``top`` is a running max
    under ``n < m`` (its tiles past the diagonal are skipped): both against torch."""
    source = COUNT.replace("BM = 16, BN = 16", f"BM = {bm}, BN = {bn}")
    kernel = _kernel_source(source, "count_later")
    assert kernel.count("skipped") == 1  # the loop of top only
    module = _load(tmp_path, "count_later", source)
    x = torch.randn(rows, cols)
    later, top = module.count_later(x)
    index = torch.arange(rows)[:, None], torch.arange(cols)[None, :]
    torch.testing.assert_close(later, (index[1] > index[0]).sum(1).float())
    torch.testing.assert_close(top, x.masked_fill(index[1] >= index[0], float("-inf")).amax(1))


COUNT_BELOW = """kernel count_earlier
  in  x: f32[M, N]
  out y: f32[M]
  out z: f32[M]
  block BM = 16, BN = 16
  grid  m over M by BM
  earlier: f32[m] = 0
  top: f32[m] = -inf
  for n over N by BN
    earlier = earlier + sum(where(n >= m, 0.0, 1.0), dim=n)
  for n over N by BN
    top = maximum(top, max(where(m < n, x[m, n], -inf), dim=n))
  y[m] = earlier
  z[m] = top
"""


@pytest.mark.parametrize("bm,bn", [(16, 16), (16, 32), (32, 16), (16, 64)])
@pytest.mark.parametrize("rows,cols", [(1, 1), (40, 100), (100, 40), (64, 64)])
def test_guards_from_below_at_every_diagonal_position(tmp_path, bm, bn, rows, cols):
    """A guard that bounds the loop from below (FlashAttention-2's backward walks the queries at
    or after a key tile): ``earlier`` counts keys before the diagonal (its first tiles must run);
    ``top`` is a running max under ``m < n`` (its tiles before the diagonal are skipped, then the
    diagonal's are masked, the ones after run without the guard, and the last is masked)."""
    source = COUNT_BELOW.replace("BM = 16, BN = 16", f"BM = {bm}, BN = {bn}")
    kernel = _kernel_source(source, "count_earlier")
    assert kernel.count("skipped") == 1  # the loop of top only
    assert "where n > m holds everywhere: no masks" in kernel
    module = _load(tmp_path, "count_earlier", source)
    x = torch.randn(rows, cols)
    earlier, top = module.count_earlier(x)
    index = torch.arange(rows)[:, None], torch.arange(cols)[None, :]
    torch.testing.assert_close(earlier, (index[1] < index[0]).sum(1).float())
    torch.testing.assert_close(top, x.masked_fill(index[1] <= index[0], float("-inf")).amax(1))


@pytest.mark.parametrize("bm,bn", [(16, 32), (32, 16), (64, 16)])
@pytest.mark.parametrize("s", [1, 17, 40, 100])
def test_causal_attention_at_other_block_sizes(tmp_path, bm, bn, s):
    """The diagonal split and the skipped tiles with BM != BN (the interpreter runs config 0)."""
    module = _load(tmp_path, "attention_causal", (ROOT / "specs" / "attention_causal.tile").read_text())
    module._CONFIGS[0] = triton.Config({"BM": bm, "BN": bn})  # this test's own copy of the module
    g = torch.Generator().manual_seed(s)
    q, k, v = (torch.randn(1, 2, s, 16, generator=g).half() for _ in range(3))
    out = module.attention_causal(q, k, v, 0.25)[0]
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, scale=0.25)
    torch.testing.assert_close(out.float(), expected, atol=1e-2, rtol=1e-2)


TRIANGULAR = """kernel tri
  in  a: f32[M, K]
  in  b: f32[K, N]
  out c: f32[M, N]
  block BM = 16, BN = 16, BK = 16
  grid  m over M by BM, n over N by BN
  acc: f32[m, n] = 0
  for k over K by BK
    acc += dot(where({first}, a[m, k], 0), where({second}, b[k, n], 0), precision=ieee)
  c[m, n] = acc
"""


@pytest.mark.parametrize("first,second,lower_a", [("k >= m", "k <= n", False), ("k <= m", "k >= n", True)])
@pytest.mark.parametrize("bm,bn,bk", [(16, 16, 16), (16, 32, 16), (32, 16, 64), (16, 16, 32)])
@pytest.mark.parametrize("rows,inner,cols", [(1, 1, 1), (40, 100, 70), (100, 37, 45), (64, 64, 64)])
def test_a_guard_on_each_side_of_the_loop_bounds_it_both_ways(tmp_path, first, second, lower_a, bm, bn, bk,
                                                              rows, inner, cols):
    """The product of two triangular matrices, ``where(k >= m, a, 0)`` and ``where(k <= n, b, 0)``,
    sums only over ``m <= k <= n``: the first guard skips the tiles of k before the diagonal of
    m, the second those after the diagonal of n (a tile of c wholly below it runs no step). The
    result is the product of the masked operands at every block size and diagonal position."""
    source = TRIANGULAR.format(first=first, second=second).replace(
        "BM = 16, BN = 16, BK = 16", f"BM = {bm}, BN = {bn}, BK = {bk}")
    kernel = _kernel_source(source, "tri")
    assert f"where {second} holds nowhere change nothing" in kernel
    module = _load(tmp_path, "tri", source)
    a, b = torch.randn(rows, inner), torch.randn(inner, cols, generator=torch.Generator().manual_seed(1))
    k = torch.arange(inner)
    kept_a = k[None, :] <= torch.arange(rows)[:, None] if lower_a else k[None, :] >= torch.arange(rows)[:, None]
    kept_b = k[:, None] >= torch.arange(cols)[None, :] if lower_a else k[:, None] <= torch.arange(cols)[None, :]
    want = (a * kept_a) @ (b * kept_b)
    torch.testing.assert_close(module.tri(a, b), want, atol=1e-4, rtol=1e-4)


BROADCAST_OPERAND = """kernel bcast
  in  v: f32[K]
  in  b: f32[K, N]
  out c: f32[N]
  block BM = 16, BN = 16, BK = 16
  grid  n over N by BN
  acc: f32[n] = 0
  for m over M by BM unmasked
    for k over K by BK
      acc += sum(dot(where(k >= m, v[k], 0), b[k, n], precision=ieee), dim=m)
  c[n] = acc
"""


@pytest.mark.parametrize("rows,inner,cols", [(16, 40, 20), (32, 70, 33), (64, 64, 16)])
def test_a_kept_operand_broadcast_by_its_condition_keeps_its_shape(tmp_path, rows, inner, cols):
    """``where(k >= m, v[k], 0)`` spans (m, k) though ``v[k]`` spans k alone: in the range where
    the guard holds everywhere the operand is still the [BM, BK] broadcast, not v's [1, BK] row
    (a sum over m of the product counts every row)."""
    source = BROADCAST_OPERAND.replace("kernel bcast", "kernel bcast\n  in  m_rows: f32[M]")
    module = _load(tmp_path, "bcast", source)
    v, b = torch.randn(inner), torch.randn(inner, cols, generator=torch.Generator().manual_seed(1))
    kept = torch.arange(inner)[None, :] >= torch.arange(rows)[:, None]
    want = ((v[None, :] * kept) @ b).sum(0)
    torch.testing.assert_close(module.bcast(torch.zeros(rows), v, b), want, atol=1e-4, rtol=1e-4)


STRIDED = """kernel t
  in  x: f32[N, C, H, W]
  in  w: f32[C, O, KH, KW]
  in  s: i32 in [1, 3] = 1
  out y: f32[N, O, HO = (H - 1) * s + KH, WO = (W - 1) * s + KW]
  block BO = {bo}, BW = {bw}, BC = 16
  grid  o over O by BO, ow over WO by BW, n over N, oh over HO
  acc: f32[ow, o] = 0
  for kh over KH
    for kw over KW
      h = oh - kh
      v = ow - kw
      divides = {divides}
      for c over C by BC
        acc += dot(where(divides, x[n, c, h // s, v // s], {other}), w[c, o, kh, kw])
  y[n, o, oh, ow] = acc
"""
SKIPPED = "a step where this is false adds nothing: skipped"
DEVICE = "cuda" if os.environ.get("TILEGEN_TEST_GPU") == "1" else "cpu"
TOLERANCE = {"atol": 1e-4, "rtol": 1e-5} if DEVICE == "cpu" else {"atol": 2e-2, "rtol": 1e-3}  # tf32 on a GPU


@pytest.mark.parametrize("bo,bw,stride", [(16, 16, 1), (16, 16, 2), (16, 16, 3), (16, 32, 2)])
def test_taps_a_stride_skips_run_nothing(tmp_path, bo, bw, stride):
    """A transposed convolution's taps whose row the stride does not divide (one value per step of
    the taps-and-channels loop) skip the step's loads and dot; the result is torch's."""
    source = STRIDED.format(bo=bo, bw=bw, divides="(h % s == 0) & (v % s == 0)", other=0)
    kernel = _kernel_source(source, "t")
    assert f"if (h % s) == 0:  # {SKIPPED}" in kernel
    module = _load(tmp_path, "t", source)
    g = torch.Generator().manual_seed(stride)
    x, w = torch.randn(2, 19, 3, 5, generator=g).to(DEVICE), torch.randn(19, 17, 3, 4, generator=g).to(DEVICE)
    want = F.conv_transpose2d(x, w, stride=stride)
    torch.testing.assert_close(module.t(x, w, stride), want, **TOLERANCE)


@pytest.mark.parametrize("divides,other", [
    ("(h % s == 0) & (v % s == 0)", 1.0),  # the false side adds a product of ones: kept
    ("v % s == 0", 0),  # no condition of one value per step
    ("(h % s == 0) | (v % s == 0)", 0),  # h false alone does not make the step false
])
def test_steps_that_may_add_something_are_not_skipped(divides, other):
    assert SKIPPED not in _kernel_source(STRIDED.format(bo=16, bw=16, divides=divides, other=other), "t")


def test_a_condition_on_the_loops_own_axis_is_not_one_value_per_step(tmp_path):
    """``c >= 0`` names the channel tiles' axis: a tile of lanes, kept in the loads' masks, not an
    ``if``; the taps the stride skips still are."""
    source = STRIDED.format(bo=16, bw=16, divides="(h % s == 0) & (v % s == 0)", other=0).replace(
        "where(divides,", "where(divides & (c >= 0),")
    kernel = _kernel_source(source, "t")
    assert f"if (h % s) == 0:  # {SKIPPED}" in kernel
    module = _load(tmp_path, "t", source)
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(1, 19, 3, 5, generator=g).to(DEVICE), torch.randn(19, 17, 3, 4, generator=g).to(DEVICE)
    torch.testing.assert_close(module.t(x, w, 2), F.conv_transpose2d(x, w, stride=2), **TOLERANCE)

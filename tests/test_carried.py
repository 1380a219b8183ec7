"""A loop's carried values: the checker refuses what would make a result depend on the block
size, at its line, and accepts the exact running forms (sums over the loop's axis, running
maxima, online softmax's rescaling), whose results the reference reproduces at every block.

Before the rule, ``carry += sum(x[r, c], dim=c)`` then ``y[r, c] = carry`` under ``for c over N
by BN`` gave torch.cumsum at BN = 1 and something else at BN = 4, with no error.
"""

import pytest
import torch

from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.runner import load_module

HEAD = """\
kernel k
  in  x: f32[M, N]
  out y: f32[M, N]
  out s: f32[M]
  block BN = 4
  grid  r over M
  carry: f32[] = 0
  m_i: f32[] = -inf
  for c over N by BN
{body}
  s[r] = carry
"""


def refused(body: str) -> str:
    with pytest.raises(SpecError) as caught:
        compile_spec(HEAD.format(body=body), "k.tile")
    return caught.value.render()


@pytest.mark.parametrize(
    ("body", "where", "says"),
    [
        # the running row sum, and a running product
        ("    carry += sum(x[r, c], dim=c)\n    y[r, c] = carry", "k.tile:11:15:", "'y' is stored inside the loop"),
        ("    carry = carry * sum(x[r, c], dim=c)\n    y[r, c] = x[r, c]", "k.tile:10:5:", "'carry' is carried"),
        # a reduction over the loop's axis stored at each step: the last tile's share
        ("    y[r, c] = x[r, c] - max(x[r, c], dim=c)", "k.tile:10:15:", "a reduction over 'c'"),
        # through a local
        ("    carry += sum(x[r, c], dim=c)\n    t = carry * 2.0\n    y[r, c] = t", "k.tile:12:15:", "from 't'"),
        ("    carry += 1\n    y[r, c] = x[r, c]", "k.tile:10:5:", "'carry' is carried"),  # counts steps
        ("    carry += max(x[r, c], dim=c)\n    y[r, c] = x[r, c]", "k.tile:10:5:", "'carry' is carried"),
        ("    carry = carry * 2.0 + sum(x[r, c], dim=c)\n    y[r, c] = x[r, c]", "k.tile:10:5:", "'carry'"),
        # a rescale whose maximum was advanced first: exp(m_i - m_new) is 1
        (
            "    m_new = maximum(m_i, max(x[r, c], dim=c))\n    m_i = m_new\n"
            "    carry = carry * exp(m_i - m_new) + sum(exp(x[r, c] - m_new), dim=c)\n    y[r, c] = x[r, c]",
            "k.tile:12:5:",
            "'carry' is carried",
        ),
        # the sum is not rescaled to the new maximum
        (
            "    m_new = maximum(m_i, max(x[r, c], dim=c))\n"
            "    carry = carry * exp(m_i - m_new) + sum(exp(x[r, c]), dim=c)\n    m_i = m_new\n    y[r, c] = x[r, c]",
            "k.tile:11:5:",
            "'carry' is carried",
        ),
    ],
)
def test_results_that_depend_on_the_block_are_refused_at_their_line(body, where, says):
    message = refused(body)
    assert f"{where} error: " in message and says in message and "on the block size" in message


@pytest.mark.parametrize(
    ("body", "oracle"),
    [
        ("    carry += sum(x[r, c], dim=c)\n    y[r, c] = x[r, c]", lambda x: x.sum(1)),
        ("    carry = carry + 2.0 * mean(x[r, c], dim=c)\n    y[r, c] = -x[r, c]", lambda x: 2 * x.mean(1)),
        ("    m_i = maximum(m_i, max(x[r, c], dim=c))\n    carry = m_i\n    y[r, c] = x[r, c]", None),
        (
            "    m_new = maximum(m_i, max(x[r, c], dim=c))\n"
            "    alpha = exp(m_i - m_new)\n"
            "    p = exp(x[r, c] - m_new)\n"
            "    carry = carry * alpha + sum(p, dim=c)\n"
            "    m_i = m_new\n"
            "    y[r, c] = x[r, c]",
            lambda x: torch.exp(x - x.amax(1, keepdim=True)).sum(1),
        ),
    ],
)
@pytest.mark.parametrize("block", [1, 4, 16, 64])
def test_exact_running_forms_give_one_result_at_every_block(tmp_path, body, oracle, block):
    text = HEAD.format(body=body)
    if oracle is None:  # carry = m_i inside the loop is a carried update too: refused
        with pytest.raises(SpecError, match="'carry' is carried"):
            compile_spec(text, "k.tile")
        return
    path = tmp_path / "k.py"
    path.write_text(compile_spec(text, "k.tile").source)
    module = load_module(path)
    x = torch.randn(3, 37, generator=torch.Generator().manual_seed(0))
    _, s = module.k(x, BN=block)
    torch.testing.assert_close(s, oracle(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(module.reference(x)[1], oracle(x), rtol=1e-5, atol=1e-5)


NESTED = """kernel k
  in  x: f32[B, I, J]
  out y: f32[B]
  block BB = 2, BI = {bi}, BJ = {bj}
  grid  b over B by BB
  p: f32[b] = {init}
  for i over I by BI
    for j over J by BJ
      {update}
  y[b] = p
"""


@pytest.mark.parametrize(("init", "update", "oracle"), [
    ("1", "p = p * prod(prod(x[b, i, j], dim=j), dim=i)", lambda x: x.double().prod(2).prod(1)),
    ("-inf", "p = maximum(p, max(max(x[b, i, j], dim=j), dim=i))", lambda x: x.double().amax((1, 2))),
])
@pytest.mark.parametrize(("bi", "bj"), [(1, 1), (2, 8), (16, 4)])
def test_nested_loops_merge_a_reduction_of_a_reduction_by_its_combine(compiled, init, update, oracle, bi, bj):
    """A reduction over the outer loop's axis of one over the inner loop's, merged into the carried
    value by the reductions' own combine: one result at every pair of blocks."""
    module = compiled(NESTED.format(bi=bi, bj=bj, init=init, update=update))
    g = torch.Generator().manual_seed(bi * 100 + bj)
    signs = torch.where(torch.rand(3, 5, 7, generator=g) < 0.5, -1.0, 1.0)
    x = torch.empty(3, 5, 7).uniform_(0.9, 1.1, generator=g) * signs
    torch.testing.assert_close(module.k(x).double(), oracle(x), rtol=1e-5, atol=0)


def test_a_reduction_over_another_axis_alone_is_still_refused():
    """``p * prod(y, dim=i)`` inside the loop over j multiplies once per step of j: refused."""
    text = NESTED.format(bi=2, bj=8, init="1", update="p = p * prod(x[b, i, 0], dim=i)")
    with pytest.raises(SpecError, match="'p' is carried"):
        compile_spec(text, "k.tile")


MASKED_LSE = """kernel k
  in  x: f32[M, N]
  in  K: i32
  out y: f32[M]
  out top: f32[M]
  block BN = 4
  grid  r over M
  m_i: f32[] = -inf
  l_i: f32[] = 0
  for c over N by BN
    z = where(c >= K, x[r, c], -inf)
    m_new = maximum(m_i, max(z, dim=c))
    l_i = l_i * exp(m_i - m_new) + sum(exp(z - m_new), dim=c)
    m_i = m_new
  y[r] = m_i + log(l_i)
  top[r] = m_i
"""


@pytest.fixture(scope="module")
def masked_lse(tmp_path_factory):
    path = tmp_path_factory.mktemp("masked_lse") / "k.py"
    path.write_text(compile_spec(MASKED_LSE, "k.tile").source)
    return load_module(path)


@pytest.mark.parametrize("block", [4, 8, 16])
@pytest.mark.parametrize("tiles", [0, 1, 2, 3])
@pytest.mark.parametrize("part", [0, 1])
def test_online_softmax_over_rows_whose_first_tiles_are_all_minus_inf(masked_lse, block, tiles, part):
    """The running max starts at -inf and stays so over the first ``tiles`` tiles (all -inf:
    masked), ``part`` more lanes of the next masked too. The rescale exp(m_i - m_new) there was
    exp(-inf + inf), NaN: at BN = 16 the log-sum-exp of x[r, 16:] was NaN and at BN = 32 right.
    Now every block gives torch's logsumexp, as the reference does."""
    x = torch.randn(3, 70, generator=torch.Generator().manual_seed(tiles * 10 + block))
    start = tiles * block + part
    y, top = masked_lse.k(x, start, BN=block)
    want = torch.logsumexp(x[:, start:], dim=1)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(top, x[:, start:].amax(1), rtol=0, atol=0)
    torch.testing.assert_close(masked_lse.reference(x, start)[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block", [4, 8, 16])
def test_online_softmax_over_rows_of_minus_inf_alone(masked_lse, block):
    """A row with no value but -inf: the running max is the reference's -inf, and the
    log-sum-exp torch's -inf (the reference's is NaN there: exp(-inf + inf) over the whole row)."""
    x = torch.randn(2, 37, generator=torch.Generator().manual_seed(block))
    y, top = masked_lse.k(x, 37, BN=block)
    assert torch.equal(top, masked_lse.reference(x, 37)[1]) and torch.isinf(top).all() and (top < 0).all()
    assert torch.equal(y, torch.logsumexp(torch.full((2, 37), -torch.inf), dim=1))


WINDOW = """kernel k
  in  q: f32[S, D]
  in  kk: f32[S, D]
  in  v: f32[S, D]
  in  W: i32
  out o: f32[S, D]
  block BM = 16, BN = 16
  grid  m over S by BM, d over D whole
  m_i: f32[m] = -inf
  l_i: f32[m] = 0
  acc: f32[m, d] = 0
  for n over S by BN
    s = where((n <= m) & (n > m - W), dot(q[m, d], kk[n, d], precision=ieee), -inf)
    m_new = maximum(m_i, max(s, dim=n))
    p = exp(s - m_new)
    alpha = exp(m_i - m_new)
    l_i = l_i * alpha + sum(p, dim=n)
    acc = acc * alpha + dot(p, v[n, d], precision=ieee)
    m_i = m_new
  o[m, d] = acc / l_i
"""


@pytest.mark.parametrize(("bm", "bn"), [(16, 16), (16, 32), (32, 16)])
def test_sliding_window_attention_written_the_natural_way_has_no_nan(compiled, bm, bn):
    """Query i sees keys i - W < j <= i: a row past the window has its first key tiles all
    masked. Written as FlashAttention is (m_i starts at -inf), half its rows were NaN."""
    module = compiled(WINDOW)
    g = torch.Generator().manual_seed(bm + bn)
    q, k, v = (torch.randn(70, 8, generator=g) for _ in range(3))
    i = torch.arange(70)
    seen = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - 20)
    want = torch.softmax(torch.where(seen, q @ k.T, -torch.inf), dim=1) @ v
    got = module.k(q, k, v, 20, BM=bm, BN=bn)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(module.reference(q, k, v, 20), want, rtol=1e-4, atol=1e-4)


def test_online_softmax_of_values_its_max_does_not_take_is_refused():
    """``exp(y - m_new)`` with ``m_new`` a max of other values: the partial sums are not exact
    (exp(y - m_new) overflows where the max so far is far below y, and is exp(y + inf) while no
    value is seen), so the update is refused at its line."""
    body = ("    m_new = maximum(m_i, max(x[r, c], dim=c))\n"
            "    carry = carry * exp(m_i - m_new) + sum(exp(2.0 * x[r, c] - m_new), dim=c)\n"
            "    m_i = m_new\n    y[r, c] = x[r, c]")
    message = refused(body)
    assert "k.tile:11:5: error: 'carry' is carried" in message
    assert "where 'm_new = maximum(m_old, max(x, dim=c))'" in message


def test_a_running_total_stored_in_the_loop_points_at_cumsum():
    """The hint names the scan the language has (it once said there was none)."""
    message = refused("    carry += sum(x[r, c], dim=c)\n    y[r, c] = carry")
    assert "cumsum(x, dim=c)" in message and "does not have" not in message

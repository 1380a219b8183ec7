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

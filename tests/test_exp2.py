"""Base-2 exponentials (tilegen/lower/exp2.py): ``exp`` of scaled logits becomes ``exp2`` with
log2(e) folded into the scale, only where every value reaching the exponent can be rescaled."""

import torch

from tests.conftest import ROOT, specs_find
from tilegen.compiler import compile_spec
from tilegen.runner import load_module


def _kernel(source, name="t"):
    text = compile_spec(source, f"{name}.tile", specs_find).source
    return text[text.index(f"def {name}_kernel"):text.index(f"def {name}(")]


ONLINE = """kernel t
  in  x: f32[M, N]
  in  scale: f32
  out y: f32[M]
  block BM = 16, BN = 16
  grid  m over M by BM
  m_i: f32[m] = -inf
  l_i: f32[m] = 0
  for n over N by BN
    s = x[m, n] * scale
    m_new = maximum(m_i, max(s, dim=n))
    l_i = l_i * exp(m_i - m_new) + sum(exp(s - m_new), dim=n)
    m_i = m_new
  y[m] = {output}
"""


def test_attention_keeps_its_logits_in_base_2():
    for name in ("attention", "attention_causal"):
        kernel = _kernel((ROOT / "specs" / f"{name}.tile").read_text(), name)
        # the factor rides on the scale; the row max is taken before it (see tests/test_scaled.py)
        # (the float32 cast, a no-op for the f32 binding of DT, is there for f16 and bf16's sake)
        factor = "(scale * 1.4426950408889634)"
        assert f"p = tl.exp2(((s_unscaled * {factor}) - m_new_or_0[:, None]).to(tl.float32))" in kernel
        assert "tl.exp(" not in kernel and kernel.count("tl.exp2(") == 4  # p and alpha, in both ranges


def test_a_stored_logit_is_read_back_in_base_e_and_one_used_elsewhere_stays_there(tmp_path):
    """The log-sum-exp output adds m_i: its store reads it back in base e (m_i * ln 2) while every
    exp runs in base 2; a store of m_i alone or of floor(m_i), and an assignment that reads it
    (z = m_i + log(l_i)), keep it exact, and every exp of it, in base e."""
    lse = _kernel(ONLINE.format(output="m_i + log(l_i)"))
    assert "m_i * 0.6931471805599453 + tl.log(" in lse and "tl.exp(" not in lse
    assigned = ONLINE.replace("  y[m] = {output}", "  z = m_i + log(l_i)\n  y[m] = z")
    for kept in (_kernel(assigned), _kernel(ONLINE.format(output="m_i")), _kernel(ONLINE.format(output="floor(m_i)"))):
        assert "tl.exp2" not in kept and "1.4426950408889634" not in kept
    only_sum = _kernel(ONLINE.format(output="l_i"))
    assert "s_unscaled = x\n" in only_sum and "(s_unscaled * (scale * 1.4426950408889634))" in only_sum
    assert "tl.exp(" not in only_sum
    for source, expected in [(ONLINE.format(output="m_i + log(l_i)"), lambda x: torch.logsumexp(x * 0.3, 1)),
                             (ONLINE.format(output="m_i"), lambda x: (x * 0.3).amax(1)),
                             (assigned, lambda x: torch.logsumexp(x * 0.3, 1)),
                             (ONLINE.format(output="l_i"),
                              lambda x: torch.exp(x * 0.3 - (x * 0.3).amax(1, keepdim=True)).sum(1))]:
        path = tmp_path / "t.py"
        path.write_text(compile_spec(source, "t.tile").source)
        x = torch.randn(37, 53)
        torch.testing.assert_close(load_module(path).t(x, 0.3), expected(x))


def test_softmax_and_cross_entropy_keep_exp():
    """A root that would need its own multiply (x - max(x)) gains nothing: left as written."""
    for name in ("softmax", "cross_entropy", "log_softmax"):
        assert "tl.exp2" not in _kernel((ROOT / "specs" / f"{name}.tile").read_text(), name)

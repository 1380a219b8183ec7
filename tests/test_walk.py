"""The model's one walk and rebuild of a body and of an expression (tilegen/model.py), which every
pass and analysis uses: nested loop bodies included, each statement kind's expressions, a
replaced part not looked inside."""

import dataclasses

from tilegen import model as m
from tilegen.parser import parse
from tilegen.spec_text import expr_text

SPEC = """\
kernel k
  in  a: f16[M, K]
  in  b: f16[K, N]
  in  s: f32
  out c: f16[M, N]
  block BM = 16, BN = 16, BK = 16
  grid  m over M by BM, n over N by BN
  acc: f32[m, n] = 0
  for k over K by BK
    t = exp(a[m, k] * s)
    acc += dot(t, b[k, n])
  c[m, n] = acc * s
"""


def test_statements_walk_nested_bodies_after_their_loop():
    spec = parse(SPEC, "k.tile")
    kinds = [type(s).__name__ for s in m.statements(spec.body)]
    assert kinds == ["Declare", "Loop", "Assign", "Accumulate", "Store"]


def test_values_and_local_name_of_each_kind():
    spec = parse(SPEC, "k.tile")
    declare, loop, store = spec.body
    assign, update = loop.body
    assert [expr_text(v) for v in m.values(declare)] == ["0"]
    assert m.values(loop) == ()
    assert [expr_text(v) for v in m.values(assign)] == ["exp(a[m, k] * s)"]
    assert [expr_text(v) for v in m.values(store)] == ["acc * s"]
    assert [m.local_name(s) for s in (declare, loop, assign, update, store)] == ["acc", None, "t", "acc", None]


def test_map_body_rebuilds_nested_statements_and_keeps_the_rest():
    spec = parse(SPEC, "k.tile")

    def scaled(e: m.Expr) -> m.Expr | None:  # every read of s as 2 * s
        return m.BinOp("*", m.Number("2", e.span), e, e.span) if isinstance(e, m.Ref) and e.name.id == "s" else None

    body = m.map_body(spec.body, lambda s: m.map_values(s, lambda e: m.map_expr(e, scaled)))
    texts = [expr_text(v) for s in m.statements(body) for v in m.values(s)]
    assert texts == ["0", "exp(a[m, k] * (2 * s))", "dot(t, b[k, n])", "acc * (2 * s)"]
    assert body[1].axis == spec.body[1].axis  # the loop itself as it was
    assert body[0] == spec.body[0]  # nothing to replace: an equal statement


def test_map_expr_does_not_look_inside_a_replacement():
    expr = parse(SPEC, "k.tile").body[1].body[0].value  # exp(a[m, k] * s)
    seen: list[str] = []

    def outer(e: m.Expr) -> m.Expr | None:
        seen.append(expr_text(e))
        return dataclasses.replace(e, func=dataclasses.replace(e.func, id="exp2")) if isinstance(e, m.Call) else None

    assert expr_text(m.map_expr(expr, outer)) == "exp2(a[m, k] * s)"
    assert seen == ["exp(a[m, k] * s)"]  # replaced: its operand is not visited

"""Parser and checker: positions, friendly syntax errors, semantic errors reported together."""

import pytest
from lark import Lark

from tilegen import model as m
from tilegen.check import check
from tilegen.errors import SpecError
from tilegen.parser import TileIndenter, parse
from tilegen.resources import data_path

GOOD = """\
kernel k
  in  a: f16[M, K]
  in  b: f16[K, N]
  out c: f16[M, N]
  block BM = 16, BN = 16, BK = 16
  grid  m over M by BM, n over N by BN
  acc: f32[m, n] = 0
  for k over K by BK
    acc += dot(a[m, k], b[k, n], precision=ieee)
  c[m, n] = acc
"""


def test_grammar_has_no_conflicts_in_strict_mode():
    Lark(
        data_path("grammars", "tile.lark").read_text(),
        parser="lalr",
        postlex=TileIndenter(),
        strict=True,
    )


def test_parse_builds_model_with_spans():
    spec = parse(GOOD, "k.tile")
    assert spec.name.id == "k"
    assert [t.name.id for t in spec.inputs] == ["a", "b"]
    assert spec.grid[1].dim.id == "N" and spec.grid[1].span.line == 6
    loop = spec.body[1]
    assert isinstance(loop, m.Loop) and loop.axis.masked
    assert loop.body[0].value.func.id == "dot"
    assert check(spec) is spec


def errors_of(text):
    with pytest.raises(SpecError) as info:
        check(parse(text, "bad.tile"))
    return info.value


def test_syntax_error_names_expected_tokens_in_words():
    error = errors_of(GOOD.replace("in  a: f16[M, K]", "in  a f16[M, K]"))
    assert error.render().startswith("bad.tile:2:9: error: unexpected 'f16'; expected ':'")
    assert "    in  a f16[M, K]\n" in error.render()
    assert error.render().rstrip().endswith("^")


def test_syntax_error_at_end_of_line():
    error = errors_of(GOOD.replace("block BM = 16,", "block BM = ,"))
    assert "bad.tile:5:14: error: unexpected ','; expected a number" in error.render()


def test_bad_indentation_is_reported_with_line():
    error = errors_of(GOOD.replace("  c[m, n] = acc", "   c[m, n] = acc"))
    assert error.render().startswith("bad.tile:10:")


def test_unknown_name_is_reported_at_its_position():
    error = errors_of(GOOD.replace("c[m, n] = acc", "c[m, n] = accc"))
    assert "bad.tile:10:13: error: unknown name 'accc'" in error.render()


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("BM = 16", "BM = 24", "block size 'BM' = 24 is not a power of two"),
        ("b[k, n]", "b[n, k]", "axis 'n' tiles 'N', but dimension 0 of 'b' is 'K'"),
        ("a[m, k]", "a[m]", "tensor 'a' has rank 2 but is indexed with 1 index"),
        ("f32[m, n] = 0", "f31[m, n] = 0", "unknown dtype 'f31'"),
        ("n over N by BN", "n over Q by BN", "not a dimension of any tensor"),
        ("c[m, n] = acc", "b[m, n] = acc", "input tensor 'b' is written"),
        ("precision=ieee", "precision=fast", "unknown precision 'fast'"),
        ("dot(", "dott(", "unknown function 'dott'"),
        ("in  b:", "in  a:", "duplicate name 'a'"),
        ("kernel k", "kernel class", "kernel name 'class' is reserved"),
        ("BM = 16, BN", "BM = 8, BN", "'dot' tiles need every block size >= 16"),
    ],
)
def test_semantic_errors(old, new, message):
    assert old in GOOD
    assert message in errors_of(GOOD.replace(old, new)).render()


def test_swizzle_needs_2d_grid():
    text = GOOD.replace("grid  m over M by BM, n over N by BN", "grid  m over M by BM").replace(
        "  acc:", "  swizzle m, n group 4\n  acc:"
    )
    assert "swizzle needs a 2D grid" in errors_of(text).render()


def test_output_never_written():
    text = GOOD.replace("  c[m, n] = acc\n", "")
    assert "output tensor 'c' is never written" in errors_of(text).render()


def test_all_errors_reported_in_one_run():
    text = GOOD.replace("BM = 16", "BM = 24").replace("c[m, n] = acc", "c[m, n] = accc")
    error = errors_of(text)
    lines = [d.span.line for d in error.diagnostics]
    assert lines == sorted(lines) and 5 in lines and 10 in lines


def test_a_zero_dim_output_is_written_without_an_index():
    """``out loss: f32[]`` (torch's ``reduction="mean"`` result) is a 0-dim output, written
    ``loss = ...``; an index on it is refused by its rank (before 0-dim outputs were in the
    language, the checker said how to write a tensor of one element instead)."""
    text = "kernel t\n  in  x: f32[N]\n  out loss: f32[]\n  grid i over N whole\n  loss = sum(x[i], dim=i)\n"
    spec = check(parse(text, "t.tile"))
    assert spec.tensor("loss").zero_dim and not spec.tensor("loss").is_scalar
    assert isinstance(spec.body[0], m.Store) and spec.body[0].index == ()
    with pytest.raises(SpecError) as caught:
        check(parse(text.replace("loss = sum", "loss[0] = sum"), "t.tile"))
    assert "tensor 'loss' has rank 0 but is indexed with 1 index" in caught.value.render()

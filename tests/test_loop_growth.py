"""Nested tile loops: the generated code grows linearly with the depth of the nest (issue item 5).

Only the innermost loop of a nest is split into its full tiles (no masks) and a masked last
tile; a loop with a loop nested in it runs as one masked loop (see tilegen/lower/ranges.py,
:func:`splits_full_tiles`). Before, every level was split, and a nest of depth d generated
2 + 4 + ... + 2**d loops. Interpreter runs at sizes with a partial tile in every dimension,
at several block sizes, against the generated reference and a torch expression of their own.
"""

import itertools

import pytest
import torch

from tilegen.compiler import compile_spec
from tilegen.runner import load_module

AXES = "abcdefgh"


def nest(depth: int) -> str:
    """A sum of squares (a squared Frobenius norm) of a ``depth``-dimensional tensor by one
    program: ``depth`` loops nested in one another, the innermost reducing every axis."""
    dims = [f"D{i}" for i in range(depth)]
    blocks = [f"B{i}" for i in range(depth)]
    lines = [
        f"kernel nest{depth}",
        f"  in  x: f32[{', '.join(dims)}]",
        "  out s: f32[1]",
        "  block " + ", ".join(f"{b} = 4" for b in blocks),
        "  acc: f32[] = 0",
    ]
    for level in range(depth):
        lines.append("  " * (level + 1) + f"for {AXES[level]} over {dims[level]} by {blocks[level]}")
    index = ", ".join(AXES[:depth])
    value = f"x[{index}] * x[{index}]"
    for level in reversed(range(depth)):
        value = f"sum({value}, dim={AXES[level]})"
    lines += ["  " * (depth + 1) + f"acc += {value}", "  s[0] = acc"]
    return "\n".join(lines) + "\n"


#: The brief's norm per batch row: a grid over B and three loops nested over C, H, W.
FROB = """kernel frob
  in  x: f32[B, C, H, W]
  out s: f32[B]
  block BC = 4, BH = 4, BW = 8
  grid  b over B
  acc: f32[] = 0
  for c over C by BC
    for h over H by BH
      for w over W by BW
        acc += sum(sum(sum(x[b, c, h, w] * x[b, c, h, w], dim=w), dim=h), dim=c)
  s[b] = acc
"""


def _kernel(source: str, name: str) -> list[str]:
    text = compile_spec(source, f"{name}.tile").source
    start = text.index(f"def {name}_kernel")
    return text[start:text.index("\n\n\n", start)].splitlines()  # the kernel, up to the module's next definition


def _loops(lines: list[str]) -> int:
    return sum(1 for line in lines if line.lstrip().startswith("for "))


def _load(tmp_path, source: str, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(compile_spec(source, f"{name}.tile").source)
    return load_module(path)


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_a_nest_of_depth_d_has_d_plus_one_loops(depth):
    lines = _kernel(nest(depth), f"nest{depth}")
    # the innermost loop as full tiles + the masked last one; every outer level one masked loop
    assert _loops(lines) == depth + 1
    # the innermost loop keeps its split: full tiles with no mask, then the masked edge
    last = f"D{depth - 1} // B{depth - 1}"
    assert any(f"range(0, {last})" in line for line in lines)
    assert any(f"range({last}, tl.cdiv(D{depth - 1}, B{depth - 1}))" in line for line in lines)
    # the outer levels run every tile, masked
    for level in range(depth - 1):
        assert any(f"for {AXES[level]} in range(0, tl.cdiv(D{level}, B{level}))" in line for line in lines)
        assert any(f"mask_{AXES[level]} = offs_{AXES[level]} < D{level}" in line for line in lines)


def test_code_grows_linearly_with_depth():
    sizes = [len(_kernel(nest(d), f"nest{d}")) for d in range(1, 5)]
    steps = [b - a for a, b in itertools.pairwise(sizes)]
    # each level adds about the same code: no step more than twice the first (2**d would double it)
    assert max(steps) <= 2 * steps[0], sizes
    frob = _kernel(FROB, "frob")
    assert _loops(frob) == 4
    assert len(frob) < 80, len(frob)


BLOCKS = [(2, 4, 4, 8), (4, 2, 8, 4), (1, 8, 2, 16)]


@pytest.mark.parametrize("blocks", BLOCKS, ids=lambda b: "x".join(map(str, b)))
@pytest.mark.parametrize("shape", [(3, 5, 7, 11), (4, 8, 8, 16)], ids=lambda s: "x".join(map(str, s)))
def test_frob_per_row(tmp_path, shape, blocks):
    module = _load(tmp_path, FROB, "frob")
    torch.manual_seed(0)
    x = torch.randn(*shape)
    _, bc, bh, bw = blocks
    got = module.frob(x, BC=bc, BH=bh, BW=bw)
    torch.testing.assert_close(got, module.reference(x), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got, x.pow(2).flatten(1).sum(1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("blocks", BLOCKS, ids=lambda b: "x".join(map(str, b)))
@pytest.mark.parametrize("depth", [3, 4])
def test_nest_sums_every_element(tmp_path, depth, blocks):
    module = _load(tmp_path, nest(depth), f"nest{depth}")
    torch.manual_seed(depth)
    shape = (3, 5, 7, 11)[-depth:]  # a partial tile in every dimension at every block size
    x = torch.randn(*shape)
    sizes = {f"B{i}": b for i, b in enumerate(blocks[-depth:])}
    got = getattr(module, f"nest{depth}")(x, **sizes)
    assert got.shape == (1,)
    torch.testing.assert_close(got, module.reference(x), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got, (x.double() ** 2).sum().float().reshape(1), rtol=1e-5, atol=1e-4)


def test_nest_on_a_strided_view(tmp_path):
    """A transposed view: the masks of the outer levels guard loads at the view's strides."""
    module = _load(tmp_path, nest(3), "nest3")
    x = torch.randn(11, 7, 5).permute(2, 1, 0)
    got = module.nest3(x, B0=4, B1=4, B2=8)
    torch.testing.assert_close(got, (x.double() ** 2).sum().float().reshape(1), rtol=1e-5, atol=1e-4)

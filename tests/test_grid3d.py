"""A 3D grid (program_id 0..2) built from a test spec, on contiguous and strided inputs."""

import pytest
import torch

from tests.conftest import ROOT
from tilegen.check import check
from tilegen.compiler import compile_spec
from tilegen.parser import parse
from tilegen.runner import load_module
from tilegen.tolerance import assert_close


@pytest.fixture(scope="module")
def scale3d(tmp_path_factory):
    spec = ROOT / "tests" / "specs" / "scale3d.tile"
    module = compile_spec(spec.read_text(), "specs/scale3d.tile")
    path = tmp_path_factory.mktemp("gen") / "scale3d.py"
    path.write_text(module.source)
    return load_module(path)


def test_source_uses_three_program_ids(scale3d):
    source = (ROOT / "tests" / "specs" / "scale3d.tile").read_text()
    text = compile_spec(source, "specs/scale3d.tile").source
    assert "tl.program_id(2)" in text
    assert "lambda meta: _rt.fold_grid(((B + BB - 1) // BB, (I + BI - 1) // BI, (J + BJ - 1) // BJ), folded)" in text


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 7, 33), (5, 9, 17)])
def test_scale3d_matches_reference(scale3d, shape):
    x = torch.randn(*shape)
    y = scale3d.scale3d(x)
    assert torch.equal(y, scale3d.reference(x))
    torch.testing.assert_close(y, 2.0 * x - 1)


def test_scale3d_strided_view(scale3d):
    x = torch.randn(6, 10, 20)[::2, 1:, ::3]
    torch.testing.assert_close(scale3d.scale3d(x), 2.0 * x - 1)


def test_masked_k_loop_handles_k_tail(tmp_path):
    """A default (masked) reduction loop: the K tail is masked with other=0, so any K works."""
    text = (ROOT / "specs" / "matmul_naive.tile").read_text().replace("by BK unmasked", "by BK")
    module = compile_spec(text, "specs/matmul_ktail.tile")
    spec = check(parse(text, "specs/matmul_ktail.tile"))
    assert "mask_k = offs_k < K - k * BK" in module.source
    path = tmp_path / "matmul_naive.py"
    path.write_text(module.source)
    mod = load_module(path)
    for m, k, n in [(7, 5, 9), (33, 20, 17), (16, 1, 16)]:
        a, b = torch.randn(m, k).half(), torch.randn(k, n).half()
        c = mod.matmul_naive(a, b, BM=16, BN=16, BK=16)
        assert_close(spec, (a, b), c, mod.reference(a, b), mod.reference)

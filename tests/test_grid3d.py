"""A 3D grid (program_id 0..2) built from a test spec, on contiguous and strided inputs."""

import pytest
import torch

from tests.conftest import ROOT
from tilegen.compiler import compile_spec
from tilegen.runner import load_module


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
    assert "triton.cdiv(B, BB), triton.cdiv(I, BI), triton.cdiv(J, BJ)" in text


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 7, 33), (5, 9, 17)])
def test_scale3d_matches_reference(scale3d, shape):
    x = torch.randn(*shape)
    y = scale3d.scale3d(x)
    assert torch.equal(y, scale3d.reference(x))
    torch.testing.assert_close(y, 2.0 * x - 1)


def test_scale3d_strided_view(scale3d):
    x = torch.randn(6, 10, 20)[::2, 1:, ::3]
    torch.testing.assert_close(scale3d.scale3d(x), 2.0 * x - 1)

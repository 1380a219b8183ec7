"""Liger-Kernel's tests of cross_entropy, fused_linear_cross_entropy and kl_div replayed through
tilegen's ops: the second half of tests/test_liger_replay.py's cases (its adapters and replays,
docs/liger.md), in a file of its own so that pytest-xdist runs the two halves on two workers."""

import pytest

from tests.liger_cases import Case
from tests.test_liger_replay import LOSSES, fewest_programs, params, run_case

__all__ = ["fewest_programs"]  # the fixture, used by name

# KLDivLoss(reduction="mean") warns that it divides by every element (Liger's test asks for it)
pytestmark = pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss:UserWarning")


@pytest.mark.parametrize("case", params(LOSSES))
def test_replay(case: Case, request: pytest.FixtureRequest, fewest_programs: None) -> None:
    """One of Liger's cases of the losses."""
    run_case(case, request)

"""Run the replay of Liger-Kernel's tests (tests/test_liger_replay.py and
tests/test_liger_replay_losses.py) and print its counts per op as Markdown: Liger's cases, how many
ran and passed (and of them how many ran without a value-neutral option or passed by accuracy
against float64: their notes), were skipped (by reason), failed as a known bug (strict xfail) or
failed; then each option tilegen lacks with the cases it would let run. Arguments go to pytest::

    python tests/liger_summary.py -n 2
    TILEGEN_TEST_GPU=1 python tests/liger_summary.py -n 0
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.liger_cases import GRIDS, all_cases  # noqa: E402

LACKS = "tilegen lacks: "


class Collector:
    """The outcome of each replayed case, by id: (outcome, reason, notes)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, tuple[str, str, tuple[str, ...]]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if "::test_replay[" not in report.nodeid:
            return
        case = report.nodeid.split("[", 1)[1][:-1]
        notes = tuple(dict(report.user_properties).get("liger_notes", ()))
        if hasattr(report, "wasxfail"):
            outcome = "xfail" if report.skipped else "xpass"
            self.outcomes[case] = (outcome, report.wasxfail, notes)
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.outcomes[case] = ("skip", reason.removeprefix("Skipped: "), notes)
        elif report.failed:
            self.outcomes[case] = ("fail", report.when, notes)
        elif report.when == "call":
            self.outcomes[case] = ("pass", "", notes)


def main(args: list[str]) -> int:
    os.environ.setdefault("TILEGEN_LIGER_FULL", "1")  # every case, under CI=true too (its subset counts none)
    collector = Collector()
    start = time.perf_counter()
    status = pytest.main(["-q", "-p", "no:cacheprovider", "tests/test_liger_replay.py",
                          "tests/test_liger_replay_losses.py", "-k", "test_replay", *args], plugins=[collector])
    elapsed = time.perf_counter() - start
    ops = {case.id: case.op for case in all_cases()}
    rows = collections.defaultdict(collections.Counter)
    reasons: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    notes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    missing: list[tuple[str, ...]] = []
    for case, (outcome, reason, case_notes) in collector.outcomes.items():
        op = ops[case]
        rows[op][outcome] += 1
        if outcome in ("skip", "xfail"):
            reasons[op][reason] += 1
        if reason.startswith(LACKS):
            missing.append(tuple(reason.removeprefix(LACKS).split("; ")))
        for note in case_notes:
            notes[op][note] += 1
    print(f"\n{len(collector.outcomes)} cases in {elapsed:.0f} s\n")
    print("| op | Liger's cases | pass | skip | known bug (xfail) | fail |")
    print("|---|---:|---:|---:|---:|---:|")
    total: collections.Counter[str] = collections.Counter()
    for op in GRIDS:
        count = sum(len(grid.cases()) for grid in GRIDS[op])
        row = rows[op]
        total.update(row)
        total["cases"] += count
        print(f"| {op} | {count} | {row['pass']} | {row['skip']} | {row['xfail']} | {row['fail'] + row['xpass']} |")
    print(f"| **all** | **{total['cases']}** | **{total['pass']}** ({100 * total['pass'] / total['cases']:.1f}%) | "
          f"**{total['skip']}** | **{total['xfail']}** | **{total['fail'] + total['xpass']}** |")
    print("\nSkipped or failing as a known bug, by reason:\n")
    for op in GRIDS:
        for reason, count in reasons[op].most_common():
            print(f"- {op}, {count}: {reason}")
    print("\nPassed with a note:\n")
    for op in GRIDS:
        for note, count in notes[op].most_common():
            print(f"- {op}, {count}: {note}")
    print("\nOptions tilegen lacks, by the cases each would let run alone (and the cases needing it with others):\n")
    alone = collections.Counter(m[0] for m in missing if len(m) == 1)
    among = collections.Counter(option for m in missing if len(m) > 1 for option in m)
    for option in sorted(set(alone) | set(among), key=lambda o: (-alone[o], -among[o], o)):
        print(f"- {option}: {alone[option]} (+{among[option]} with another)")
    combined = collections.Counter(m for m in missing if len(m) > 1)
    for options, count in combined.most_common():
        print(f"- together, {'; '.join(options)}: {count}")
    return int(status)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Every hang rule against every hang scenario (tests/support/hangscenarios.py), as a table:
when each rule named the hang after the last progress, and its false alarms.

    .venv/bin/python scripts/hang_scenarios.py

Time is simulated: the whole table takes about a second. Its figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "support"))

from hangscenarios import RULES, SCENARIOS, run_rule  # noqa: E402


def cell(named_at: float | None, hang_at: float | None) -> str:
    if named_at is None:
        return "never" if hang_at is not None else "no alarm"
    if hang_at is None or named_at < hang_at:
        return f"FALSE ALARM at {named_at:.0f} s"
    return f"{named_at - hang_at:.0f} s"


def main() -> int:
    names = list(RULES)
    print("| scenario | " + " | ".join(names) + " | culprit named | stack samples |")
    print("|---" * (len(names) + 3) + "|")
    false = 0
    for sc in SCENARIOS:
        outs = [rule(sc) for rule in RULES.values()]
        stacks = run_rule(sc)
        false += stacks.false_alarm
        culprit = ", ".join(map(str, stacks.culprits)) or "-"
        row = [sc.name, *(cell(o.named_at, sc.hang_at) for o in outs), culprit, str(stacks.samples)]
        print("| " + " | ".join(row) + " |")
    print(f"\nthe stack rule's false alarms: {false}")
    return 1 if false else 0


if __name__ == "__main__":
    sys.exit(main())

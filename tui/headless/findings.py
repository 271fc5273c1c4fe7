"""The checks' findings as lines, for `check` and a launch's printer alike: one a finding, or each
finding once for all the hosts it was found on; the deep check's, then its verdict."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ddptui.remote.events import DeepChecked, Finding

from ..text import Fold

LEVEL_TAGS = {"failure": "FAIL", "warning": "warn", "ok": "ok"}  # in the order said


def finding_line(level: str, hosts: str, check: str, message: str) -> str:
    """`FAIL node3 gpu: nvidia-smi failed ...`: one finding on one line (hosts folded)."""
    where = f"{hosts} " if hosts else ""
    return f"{LEVEL_TAGS[level]} {where}{check}: {message}"


def finding_lines(
    findings: Iterable[Finding], addresses: Mapping[str, str] | None = None
) -> list[str]:
    """Each finding once for all the hosts it was found on (`warn node[0-127] py-spy: ...`),
    failures first."""
    findings = list(findings)
    out = []
    for level in LEVEL_TAGS:
        same = Fold(addresses)
        for f in findings:
            if f.level == level:
                same.add(f.host, f.message, f.check)
        out += [finding_line(level, hosts, str(check), text) for check, hosts, text in same.take()]
    return out


def deep_lines(deep: DeepChecked, addresses: Mapping[str, str] | None = None) -> list[str]:
    """The deep check's findings (folded across hosts), then its verdict in a line."""
    failures = sum(f.level == "failure" for f in deep.findings)
    verdict = "passed" if deep.ok else f"failed ({failures} failures)"
    return [
        *finding_lines(deep.findings, addresses),
        f"deep check {verdict} in {deep.seconds:.1f} s",
    ]

"""Checking hosts before a launch: each host's facts probed (probe) and judged into findings
(judge, container), the GPUs a job would see (visible) and may take (leased), every host at once
(preflight), and the deep check's figures read (fabric)."""

"""Host ranges both ways: unfolded as the inventory writes them, folded where they are listed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remote import fold


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
        ("10.0.0.[11-13]", ["10.0.0.11", "10.0.0.12", "10.0.0.13"]),
        ("node[1-2,7,10-11]", ["node1", "node2", "node7", "node10", "node11"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[3,1]", ["n3", "n1"]),  # in the order written: the node ranks follow it
        ("r[1-2]-g[0-1]", ["r1-g0", "r1-g1", "r2-g0", "r2-g1"]),
        ("n[ 1 - 2 ]", ["n1", "n2"]),
        ("plain", ["plain"]),
        ("[fe80::1]", ["[fe80::1]"]),  # not a range: an IPv6 address in brackets
        ("n[a-b]", ["n[a-b]"]),
    ],
)
def test_unfold(pattern: str, names: list[str]) -> None:
    assert fold.unfold(pattern) == names


@pytest.mark.parametrize("pattern", ["n[5-1]", "n[0-100000]", "a[1-1000]b[1-1000]"])
def test_unfold_refuses(pattern: str) -> None:
    with pytest.raises(fold.RangeError):
        fold.unfold(pattern)


@given(
    st.text("abc-", min_size=1, max_size=4),
    st.lists(st.integers(0, 300), min_size=1, max_size=40, unique=True),
    st.sampled_from([0, 3]),
)
def test_fold_and_unfold_agree(prefix: str, numbers: list[int], width: int) -> None:
    names = [f"{prefix}{n:0{width}d}" for n in sorted(numbers)]
    assert fold.unfold(fold.hosts(names)) == names


def test_a_list_of_ranges_splits_between_them() -> None:
    assert fold.split("node[1-3,7], gpu07,,x") == ["node[1-3,7]", "gpu07", "x"]

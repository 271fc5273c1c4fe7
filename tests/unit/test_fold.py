"""Host ranges both ways: unfolded as the inventory writes them, folded where they are listed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddptui.remote import fold


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
        ("gpu[99-101]", ["gpu99", "gpu100", "gpu101"]),
        ("gpu[098-101]", ["gpu098", "gpu099", "gpu100", "gpu101"]),
    ],
)
def test_unfold(pattern: str, names: list[str]) -> None:
    assert fold.unfold(pattern) == names


@pytest.mark.parametrize(
    ("pattern", "at", "words"),
    [
        ("gpu[01-08", 4, "unclosed range"),
        ("node[]", 6, "empty range"),
        ("node[1-]", 7, "range 1- has no end"),
        ("node[-3]", 6, "range -3 has no start"),
        ("node[1-9/2]", 9, "ranges are numeric"),
        ("node[[1-2]]", 6, "a range inside a range"),
        ("gpu[c-d]", 5, "ranges are numeric"),
        ("gpu[1,,3]", 7, "empty range"),
        ("gpu1]", 5, "']' closes no range"),
        ("[/x:]", 2, "ranges are numeric"),  # not an IPv6 address
        ("n[5-1]", 3, "goes backwards"),
        ("n[0-100000]", 2, "more than 100,000 hosts"),
        ("a[1-1000]b[1-1000]", 11, "more than 100,000 hosts"),
        ("node[1-1000000000]", 5, "more than 100,000 hosts"),
        ("n[" + "9" * 5000 + "]", 3, "more than 12 digits"),
    ],
)
def test_unfold_refuses_naming_the_character(pattern: str, at: int, words: str) -> None:
    with pytest.raises(fold.RangeError) as err:
        fold.unfold(pattern)
    assert words in str(err.value) and f"(at character {at})" in str(err.value)
    assert err.value.at == at - 1


def test_the_size_guard_comes_before_any_name_is_built() -> None:
    """A billion names would exhaust memory: refused on the count alone, at once."""
    with pytest.raises(fold.RangeError):
        fold.unfold("node[1-1000000000]b[1-1000000000]")


@pytest.mark.parametrize(
    ("names", "folded"),
    [
        ([f"gpu{i:02d}" for i in range(1, 129)], "gpu[01-128]"),  # one width, past 99
        ([f"node{i}-ib" for i in range(1, 257)], "node[1-256]-ib"),  # a common suffix
        (["gpu01", "gpu1", "gpu2"], "gpu[1-2,01]"),  # two widths, each written back as it was
        (["gpu-b", "node1", "login"], "node1,gpu-b,login"),
    ],
)
def test_fold(names: list[str], folded: str) -> None:
    assert fold.hosts(names) == folded
    assert set(fold.names(folded)) == set(names)


@given(
    st.lists(
        st.tuples(
            st.text("abc-.", min_size=1, max_size=4),
            st.lists(st.integers(0, 300), min_size=1, max_size=40, unique=True),
            st.sampled_from([0, 2, 3]),
            st.text("-.ib", max_size=3),
        ),
        min_size=1,
        max_size=3,
        unique_by=lambda group: (group[0], group[3]),
    )
)
def test_unfold_of_fold_gives_the_names_back(
    groups: list[tuple[str, list[int], int, str]],
) -> None:
    names = [
        f"{prefix}{n:0{width}d}{suffix}"
        for prefix, numbers, width, suffix in groups
        for n in sorted(numbers)
    ]
    if len(set(names)) == len(names):  # `a-1` + `-1` and `a-` + `1-1`: one name twice
        assert fold.names(fold.hosts(names)) == names


def test_a_list_of_ranges_splits_between_them() -> None:
    assert fold.split("node[1-3,7], gpu07,,x") == ["node[1-3,7]", "gpu07", "x"]

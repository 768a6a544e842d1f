"""FencedRanges against a model (a set of offsets): add, clip, covers, and the file across reopen."""

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.storage.fences import FENCE_FILE, FencedRanges
from sparklog.storage.files import OS_FILES

ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 60), st.integers(0, 60)),
    st.tuples(st.just("clip"), st.integers(0, 60), st.integers(0, 80)),
), max_size=25)


def offsets(ranges):
    return {o for a, b in ranges for o in range(a, b)}


@settings(max_examples=60, deadline=None)
@given(ops=ops, probe=st.tuples(st.integers(0, 60), st.integers(0, 60)))
def test_ranges_match_a_set_of_offsets_and_survive_reopen(ops, probe):
    with tempfile.TemporaryDirectory() as directory:
        fences, model, heard = FencedRanges.load(OS_FILES, directory), set(), []
        fences._on_change = heard.append
        for op, a, b in ops:
            if op == "add":
                fences.add(a, b)
                model |= set(range(a, b))
            else:
                fences.clip(a, b)
                model &= set(range(a, b))
            ranges = fences.ranges
            assert offsets(ranges) == model
            assert all(x < y for x, y in ranges) and all(ranges[i][1] < ranges[i + 1][0] for i in range(len(ranges) - 1))
        assert fences.covers(*probe) == (set(range(*probe)) <= model)
        assert FencedRanges.load(OS_FILES, directory).ranges == fences.ranges
        assert not heard or heard[-1] == fences.ranges


def test_an_unreadable_file_is_ignored_with_an_error(tmp_path, caplog):
    (tmp_path / FENCE_FILE).write_text("0\n2\n5 3\n")
    assert FencedRanges.load(OS_FILES, str(tmp_path)).ranges == ()
    assert "unreadable" in caplog.text

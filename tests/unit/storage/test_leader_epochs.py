"""LeaderEpochCache against a model of KIP-101/279, and its checkpoint file (tmp -> fsync -> rename)."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.storage.files import OS_FILES
from sparklog.storage.leader_epochs import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    EpochEndOffset,
    LeaderEpochCache,
)


class Model:
    """Epoch of every offset below the LEO; the cache must answer as if it read this."""

    def __init__(self):
        self.epochs: list[int] = []  # epoch of offset i
        self.start = 0  # log start offset

    def end_offset_for(self, epoch):
        known = [self.epochs[o - self.start] for o in range(self.start, self.start + len(self.epochs))]
        leo = self.start + len(known)
        if epoch == UNDEFINED_EPOCH or not known:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if epoch == known[-1]:
            return EpochEndOffset(epoch, leo)
        if epoch > known[-1]:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        below = [e for e in known if e <= epoch]
        first_above = next(self.start + i for i, e in enumerate(known) if e > epoch)
        return EpochEndOffset(max(below) if below else epoch, first_above)


operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 3), st.integers(1, 5)),  # epoch bump, records
    st.tuples(st.just("truncate"), st.integers(0, 40)),
    st.tuples(st.just("retain"), st.integers(0, 40)),
), max_size=30)


@settings(max_examples=150, deadline=None)
@given(ops=operations, asked=st.lists(st.integers(-1, 12), min_size=1, max_size=8))
def test_cache_answers_as_the_log_it_follows(tmp_path_factory, ops, asked):
    directory = str(tmp_path_factory.mktemp("epochs"))
    cache, model, epoch = LeaderEpochCache(directory, OS_FILES), Model(), 0
    for op in ops:
        leo = model.start + len(model.epochs)
        if op[0] == "append":
            epoch += op[1]
            cache.assign(epoch, leo)
            model.epochs += [epoch] * op[2]
        elif op[0] == "truncate" and op[1] < leo:
            cut = max(op[1], model.start)
            model.epochs = model.epochs[:cut - model.start]
            cache.truncate_from_end(cut)
            epoch = max([epoch] + model.epochs) if model.epochs else epoch
        elif op[0] == "retain" and model.start <= op[1] <= leo:
            model.epochs = model.epochs[op[1] - model.start:]
            model.start = op[1]
            cache.truncate_from_start(op[1])
    leo = model.start + len(model.epochs)
    for e in asked:
        if model.epochs:
            assert cache.end_offset_for(e, leo) == model.end_offset_for(e), (e, cache.entries, model.epochs)
    # the checkpoint holds exactly what the cache holds
    assert LeaderEpochCache.load(directory, OS_FILES).entries == cache.entries


def test_checkpoint_format_is_kafkas(tmp_path):
    cache = LeaderEpochCache(str(tmp_path), OS_FILES)
    cache.assign(0, 0)
    cache.assign(3, 120)
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n2\n0 0\n3 120\n"
    assert not os.path.exists(tmp_path / (LEADER_EPOCH_CHECKPOINT_FILE + ".tmp"))


def test_stale_or_lower_epochs_are_ignored_and_higher_start_replaces(tmp_path):
    cache = LeaderEpochCache(str(tmp_path), OS_FILES)
    assert cache.assign(2, 10)
    assert not cache.assign(2, 15) and not cache.assign(1, 20)
    assert cache.assign(4, 5)  # a later leader rewrote from 5 on: the entry starting at 10 goes
    assert cache.entries == (EpochEntry(4, 5),)


def test_unreadable_checkpoint_is_an_empty_cache(tmp_path):
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_text("0\n2\n0 0\n")  # count does not match
    assert LeaderEpochCache.load(str(tmp_path), OS_FILES).entries == ()
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_text("0\n2\n3 0\n1 9\n")  # not increasing
    assert LeaderEpochCache.load(str(tmp_path), OS_FILES).entries == ()

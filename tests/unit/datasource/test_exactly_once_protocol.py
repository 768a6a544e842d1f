"""exactly_once.py's decide/recover (Rules 1-3) against a model of the coordinator and of Spark's replay, the
driver crashing at any step of any batch's commit (hypothesis): every batch's rows end visible exactly once.
The ledger and EndTxn are the model's here; the real ones run in test_datasource_exactly_once."""

from __future__ import annotations

import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.datasource import exactly_once
from sparklog.datasource.exactly_once import PreparedCommitMessage

PARTITIONS = 2
OPTIONS = types.SimpleNamespace(transactional_id_prefix="p")  # all decide/recover read of the options


class Crash(Exception):
    pass


class World:
    """The coordinator (each id's epoch and its transactions' fate), the ledger, and a crash countdown."""

    def __init__(self, crash_at: int | None) -> None:
        self.epochs: dict[str, int] = {}
        self.fate: dict[tuple[str, int, int], str] = {}  # (tid, pid, epoch) -> open / committed / aborted
        self.rows: dict[tuple[str, int, int], tuple[int, int]] = {}
        self.decision = None
        self.steps, self.crash_at = 0, crash_at

    def step(self) -> None:
        self.steps += 1
        if self.crash_at is not None and self.steps == self.crash_at:
            self.crash_at = None
            raise Crash()

    def task(self, batch: int, partition: int) -> PreparedCommitMessage:
        tid = f"p-{partition}"
        old = self.epochs.get(tid, -1)
        for key, fate in self.fate.items():  # InitProducerId fences and aborts the open one
            if key[0] == tid and fate == "open":
                self.fate[key] = "aborted"
        self.epochs[tid] = old + 1
        key = (tid, 1000 + partition, old + 1)
        self.fate[key], self.rows[key] = "open", (batch, partition)
        return PreparedCommitMessage(1, key)

    def end(self, transactions, commit: bool) -> list[str]:
        fenced = []
        for key in transactions:
            key = tuple(key)
            self.step()
            wanted = "committed" if commit else "aborted"
            if self.fate[key] == "open" and self.epochs[key[0]] == key[2]:
                self.fate[key] = wanted
            elif self.fate[key] != wanted:
                fenced.append(key[0])
        return fenced

    def visible(self) -> list[tuple[int, int]]:
        return sorted(self.rows[k] for k, fate in self.fate.items() if fate == "committed")


@pytest.fixture
def world_factory(monkeypatch):
    holder = {}

    class Ledger:
        def __init__(self, options) -> None:
            self.world = holder["world"]

        def last(self):
            return self.world.decision

        def record(self, decision) -> None:
            self.world.step()
            self.world.decision = decision

    monkeypatch.setattr(exactly_once, "Ledger", Ledger)
    monkeypatch.setattr(exactly_once, "end_all", lambda options, txns, commit: holder["world"].end(txns, commit))

    def make(crash_at):
        holder["world"] = World(crash_at)
        return holder["world"]

    return make


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # the
# fixture only patches; each example makes its own World
@given(batches=st.integers(1, 4), crashes=st.lists(st.integers(1, 12), max_size=3))
def test_every_batch_is_visible_once_whatever_commit_step_the_driver_dies_at(world_factory, batches, crashes):
    world = world_factory(None)
    pending_crashes = list(crashes)
    committed_log, batch = -1, 0  # Spark's commit log: the last batch it recorded
    exactly_once.recover(OPTIONS)
    while batch < batches:
        if world.crash_at is None and pending_crashes:
            world.crash_at = world.steps + pending_crashes.pop(0)
        messages = [world.task(batch, p) for p in range(PARTITIONS)]
        try:
            exactly_once.decide(OPTIONS, messages, batch)
            committed_log = batch
            batch += 1
        except Crash:  # the driver dies: restart, recover, Spark replays the batch after its commit log
            while True:
                try:
                    exactly_once.recover(OPTIONS)
                    break
                except Crash:
                    continue
            batch = committed_log + 1
    assert world.visible() == [(b, p) for b in range(batches) for p in range(PARTITIONS)]

"""The marker channel's Rule 2 (markers.py): which partitions' markers are done after an answer, and which
partitions are gone from the metadata; and its send loop against a leader that answers in turn."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from sparklog.broker.coordinator.transaction import markers
from sparklog.protocol.write_txn_markers import (WritableTxnMarkerPartitionResult, WritableTxnMarkerResult,
                                                 WritableTxnMarkerTopicResult, WriteTxnMarkersResponse)


def answer(codes: dict) -> WriteTxnMarkersResponse:
    return WriteTxnMarkersResponse(markers=[WritableTxnMarkerResult(producer_id=7, topics=[
        WritableTxnMarkerTopicResult(name=t, partitions=[WritableTxnMarkerPartitionResult(
            partition_index=p, error_code=c)]) for (t, p), c in codes.items()])])


def test_none_and_a_stale_epoch_are_done_anything_else_is_retried():
    done = markers._written(answer({("t", 0): 0, ("t", 1): 47, ("t", 2): 6, ("t", 3): 19, ("u", 0): 7}))
    assert done == {("t", 0), ("t", 1)}


def snapshot(leaders: dict, brokers=(1, 2)):
    topics = {}
    for (t, p), leader in leaders.items():
        topics.setdefault(t, SimpleNamespace(partitions={})).partitions[p] = SimpleNamespace(leader=leader)
    return SimpleNamespace(topics=topics, brokers={b: SimpleNamespace(host="h", port=b) for b in brokers})


def test_send_retries_until_every_marker_is_written_and_drops_gone_partitions():
    partitions = SimpleNamespace(snapshot=snapshot({("t", 0): 1, ("t", 1): 2, ("t", 2): -1}))
    channel = markers.MarkerChannel(partitions, 9)
    answers = {1: [{("t", 0): 6}, {("t", 0): 0}], 2: [{("t", 1): 0}]}
    sent = []

    async def fake_write(broker, pid, epoch, commit, coordinator_epoch, tps):
        sent.append((broker, tuple(tps)))
        codes = answers[broker].pop(0)
        if len(sent) == 2:  # meanwhile t-2's topic partition disappears from the metadata
            partitions.snapshot = snapshot({("t", 0): 1, ("t", 1): 2})
        return set(tps) - markers._written(answer(codes))

    channel._write = fake_write
    sending = channel.send(7, 1, True, 3, {("t", 0), ("t", 1), ("t", 2)}, lambda: True)
    assert asyncio.run(asyncio.wait_for(sending, 10))
    assert sorted(sent) == [(1, (("t", 0),)), (1, (("t", 0),)), (2, (("t", 1),))]
    assert channel.retries == 1


def test_send_stops_when_no_longer_coordinator():
    partitions = SimpleNamespace(snapshot=snapshot({("t", 0): -1}))
    channel = markers.MarkerChannel(partitions, 9)
    calls = iter([True, False])
    assert asyncio.run(channel.send(7, 1, True, 3, {("t", 0)}, lambda: next(calls))) is False

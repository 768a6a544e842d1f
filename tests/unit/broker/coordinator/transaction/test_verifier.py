"""The partition leader's side of KIP-890 part 1 (verifier.py) on real PartitionLogs, the coordinator's answers
given by the test in place of the network hop: Rule 3's order and guard, Rule 2's batching per coordinator,
Rule 4's errors for Produce."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from sparklog.broker.coordinator.transaction.verifier import (INVALID_TXN_STATE, NOT_ENOUGH_REPLICAS, PartitionVerifier,
                                                              Wanted, produce_error)
from sparklog.records.batch import build_batch
from sparklog.storage import Flusher, PartitionLog

TP = ("t", 0)
SETTINGS = {"flush.ms": 10**12, "file.delete.delay.ms": 0}


def txn_batch(pid: int, sequence: int) -> bytes:
    return build_batch([(None, b"v", None, time.time_ns() // 1_000_000)], producer_id=pid, producer_epoch=0,
                       base_sequence=sequence, is_transactional=True)


@pytest.fixture
def plog(tmp_path):
    flusher = Flusher()
    log = PartitionLog.open(str(tmp_path / "t-0"), SETTINGS, flusher=flusher)
    yield log
    log.close()
    flusher.close()


class Answered(PartitionVerifier):
    """The coordinator's answers come from `answers` (a future per ask), not over the network."""

    def __init__(self):
        snapshot = SimpleNamespace(brokers={1: None})
        super().__init__(SimpleNamespace(snapshot=snapshot), lambda tid, snap: 1, 1, True)
        self.asks: list[asyncio.Future] = []

    async def verify(self, transactional_id, producer_id, epoch, partitions):
        self.asks.append(asyncio.get_running_loop().create_future())
        return await self.asks[-1]


def test_produce_errors_are_kafkas_for_produce_before_kip_890s_versions():
    assert produce_error(48) == (48, "Partition was not added to the transaction")
    assert produce_error(90) == (47, None)  # PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH
    for retriable in (13, 14, 15, 16, 51):
        code, message = produce_error(retriable)
        assert code == NOT_ENOUGH_REPLICAS and message.startswith("Unable to verify the partition")
    assert produce_error(49) == (49, None)


def test_a_later_request_waits_for_the_earlier_and_appends_after_it_without_asking_again(plog):
    async def scenario():
        verifier = Answered()
        assert verifier.needs(plog, TP, 7, 0) and plog.transaction_verifier is not None
        order = []

        async def request(sequence: int):
            async with verifier.verified("tx", [Wanted(TP, plog, 7, 0)]) as refused:
                assert refused == {}
                order.append(plog.append_as_leader(txn_batch(7, sequence), 0))

        first = asyncio.ensure_future(request(0))
        second = asyncio.ensure_future(request(1))
        await asyncio.sleep(0.01)
        assert verifier.needs(plog, TP, 7, 0)  # in flight: the fast paths leave it to the general path
        assert len(verifier.asks) == 1  # the second waits for the first
        verifier.asks[0].set_result({TP: 0})
        await asyncio.gather(first, second)
        assert order == [0, 1] and len(verifier.asks) == 1  # verified once, cached for the second
        assert not verifier.needs(plog, TP, 7, 0)

    asyncio.run(scenario())


def test_a_marker_written_while_the_coordinator_answers_refuses_the_batch(plog):
    async def scenario():
        verifier = Answered()
        verifier.needs(plog, TP, 7, 0)

        async def request():
            async with verifier.verified("tx", [Wanted(TP, plog, 7, 0)]) as refused:
                return refused

        pending = asyncio.ensure_future(request())
        await asyncio.sleep(0.01)
        plog.append_control_batch(7, 0, False, 0, 0)  # the coordinator aborted; its marker came first
        verifier.asks[0].set_result({TP: 0})
        assert await pending == {TP: (INVALID_TXN_STATE, "Partition was not added to the transaction")}

    asyncio.run(scenario())


def test_asks_are_batched_per_coordinator_while_one_request_is_out():
    async def scenario():
        snapshot = SimpleNamespace(brokers={1: None, 2: None})
        verifier = PartitionVerifier(SimpleNamespace(snapshot=snapshot), lambda tid, snap: 1, 3, True)
        sent, release = [], asyncio.Event()

        async def send(node, batch):
            sent.append({tid: (q.producer_id, sorted(q.partitions)) for tid, q in batch.items()})
            await release.wait()
            return {tid: dict.fromkeys(q.partitions, 0) for tid, q in batch.items()}

        verifier._send = send
        first = asyncio.ensure_future(verifier.verify("a", 1, 0, [("t", 0)]))
        await asyncio.sleep(0.01)
        later = [asyncio.ensure_future(verifier.verify("b", 2, 0, [("t", 1)])),
                 asyncio.ensure_future(verifier.verify("c", 3, 0, [("t", 2)])),
                 asyncio.ensure_future(verifier.verify("c", 3, 0, [("t", 3)]))]
        stale = await verifier.verify("c", 3, -1, [("t", 4)])  # below the queued epoch
        await asyncio.sleep(0.01)
        release.set()
        assert await first == {("t", 0): 0} and [await f for f in later] == [
            {("t", 1): 0}, {("t", 2): 0}, {("t", 3): 0}]
        assert stale == {("t", 4): 47}
        assert sent == [{"a": (1, [("t", 0)])}, {"b": (2, [("t", 1)]), "c": (3, [("t", 2), ("t", 3)])}]

    asyncio.run(scenario())

"""KIP-890 part 1 against three real brokers (coordinator/transaction/verifier.py): a transactional write that
arrives after its transaction was aborted (a zombie) is refused by the partition leader, nothing of it is
appended, and the last stable offset does not hang on it; a producer SIGSTOPped past its transaction's timeout
and resumed gets its late write refused the same way. Without the leader's verification both writes would
open a transaction at the partition that no marker ever closes: read_committed readers would stop there for
good."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from support import wire
from support.cluster import wait_until
from support.transactions import TIMEOUT_S, describe, producer, read_values, transaction_cluster
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from sparklog.protocol.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.records.batch import build_batch

pytestmark = pytest.mark.slow

INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH = 48, 47
STOPPABLE = Path(__file__).resolve().parent.parent / "support" / "stoppable_producer.py"


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    return transaction_cluster(request, zookeeper, tmp_path_factory, "kip890", topics=(("zraw", 1), ("zstop", 1)))


def leader_address(cluster, topic: str) -> tuple[str, int]:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=TIMEOUT_S)
    broker = cluster.brokers[metadata.topics[topic].partitions[0].leader]
    return broker.host, broker.port


def latest(cluster, topic: str, isolation_level: int) -> int:
    """ListOffsets latest of partition 0 from its leader: the HW (0) or the LSO (1, read_committed)."""
    body = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    (part,) = wire.request(*leader_address(cluster, topic), ApiKey.LIST_OFFSETS, 5, body).topics[0].partitions
    assert part.error_code == 0, part.error_code
    return part.offset


def stable_end(cluster, topic: str) -> int:
    """The partition's end once the LSO has reached the HW (the markers replicated); fails if it never does."""
    ends = []

    def settled() -> bool:
        ends[:] = [latest(cluster, topic, 1), latest(cluster, topic, 0)]
        return ends[0] == ends[1]

    wait_until(settled, f"{topic}-0's last stable offset reaching its high watermark ({ends})", TIMEOUT_S)
    return ends[1]


def test_a_zombie_write_after_the_abort_is_refused_and_the_lso_does_not_hang(cluster):
    tid = f"zombie-{uuid.uuid4().hex[:8]}"
    p = producer(cluster, tid)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce("zraw", b"a0", partition=0)
    assert p.flush(TIMEOUT_S) == 0
    state = describe(cluster, tid)
    producer_id, epoch = state.producer_id, state.producer_epoch
    p.abort_transaction(TIMEOUT_S)
    end = stable_end(cluster, "zraw")
    # the same producer's next batch of the aborted transaction, delayed in the network until now
    late = build_batch([(None, b"zombie", None, None)], producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=1, is_transactional=True)
    body = ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[TopicProduceData(
        name="zraw", partition_data=[PartitionProduceData(index=0, records=late)])])
    response = wire.request(*leader_address(cluster, "zraw"), ApiKey.PRODUCE, 8, body, timeout=TIMEOUT_S)
    (part,) = response.responses[0].partition_responses
    assert (part.error_code, part.error_message) == (INVALID_TXN_STATE, "Partition was not added to the transaction")
    assert stable_end(cluster, "zraw") == end  # nothing appended, nothing left open
    later = producer(cluster, f"after-{uuid.uuid4().hex[:8]}")
    later.init_transactions(TIMEOUT_S)
    later.begin_transaction()
    later.produce("zraw", b"c0", partition=0)
    later.commit_transaction(TIMEOUT_S)
    assert read_values(cluster, "zraw", "read_committed", 1) == ["c0"]


def test_a_producer_stopped_past_its_timeout_has_its_late_write_refused(cluster):
    tid = f"stopped-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, str(STOPPABLE), cluster.bootstrap, tid, "zstop", "4000"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert json.loads(proc.stdout.readline()) == {"ready": True}
        assert _send(proc, "s0") == {"value": "s0", "error": None}
        os.kill(proc.pid, signal.SIGSTOP)  # paused past transaction.timeout.ms: the coordinator aborts
        wait_until(lambda: describe(cluster, tid).transaction_state == "CompleteAbort", "the coordinator's abort",
                   TIMEOUT_S)
        end = stable_end(cluster, "zstop")
        os.kill(proc.pid, signal.SIGCONT)
        late = _send(proc, "s1")
        assert late["error"] is not None, late  # refused: fenced (INVALID_PRODUCER_EPOCH) by the verification
        assert stable_end(cluster, "zstop") == end
        assert "s1" not in read_values(cluster, "zstop", "read_uncommitted", 1)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.communicate()


def _send(proc, value: str) -> dict:
    proc.stdin.write(value + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())

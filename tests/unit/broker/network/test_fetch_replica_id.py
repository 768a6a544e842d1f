"""dispatch.fetch_replica_id, which exempts replication from client quotas (dispatch Rule 7), at every Fetch
version: v0-11 the body's first int32 behind a v1 header; v12-14 behind a v2 header (its tagged fields); v15+
the replica_state's (KIP-903: replica_id is no longer in the body). A consumer's Fetch is -1 at every version:
read as a follower's, it ran free of its consumer_byte_rate (a confluent-kafka consumer at v16 read 40 MiB
under a 2 MiB/s quota in test_quotas)."""

from __future__ import annotations

import pytest

from sparklog.broker.network.dispatch import fetch_replica_id
from sparklog.protocol import ApiKey
from sparklog.protocol.fetch import FetchRequest, ReplicaState
from sparklog.protocol.registry import ALL_VERSIONS, encode_request

VERSIONS = range(ALL_VERSIONS[ApiKey.FETCH][0], ALL_VERSIONS[ApiKey.FETCH][1] + 1)


def frame(version: int, replica_id: int) -> memoryview:
    follower = replica_id >= 0
    body = FetchRequest(replica_id=replica_id, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, topics=[],
                        replica_state=ReplicaState(replica_id=replica_id, replica_epoch=3) if follower else None)
    return memoryview(encode_request(ApiKey.FETCH, version, 9, "rdkafka", body))[4:]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_consumers_fetch_is_minus_one_and_a_followers_its_broker_id(version):
    assert fetch_replica_id(frame(version, -1)) == -1
    assert fetch_replica_id(frame(version, 2)) == 2

"""One function per Kafka API: `handle_x(request, state) -> response body`, with no socket access, one module per API
family: produce, fetch, offsets (ListOffsets, OffsetForLeaderEpoch), metadata (ApiVersions, Metadata, the topics),
coordinators (FindCoordinator, InitProducerId, OffsetCommit, OffsetFetch) and admin; `leadership` decides who
serves a partition, `error_codes` holds the one table from storage exceptions to Kafka error codes, `state` the
`BrokerState` the handlers read. This package holds the table of them all (`HANDLERS`).

Rule 1: a handler returns the response body, or None (Produce with acks=0), or a coroutine that resolves to
one of those (a long-polling Fetch, an acks=all Produce parked in the purgatory until the high watermark
passes its batches, anything that writes to ZooKeeper: those calls block, so they run on `state.executor`
threads and the event loop never waits for ZooKeeper).
Rule 3: Produce, Fetch, ListOffsets and OffsetForLeaderEpoch are served by the leader only, in its current
leader epoch (`current_leader_epoch` older: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH); a follower's
Fetch (replica_id >= 0) reads up to the log end and reports the follower's LEO (replica_manager.py).
Rule 4: a Fetch at an offset inside a fenced range (bit rot, storage/fences.py) of a leader with another
in-sync replica answers NOT_LEADER_OR_FOLLOWER: that replica is about to lead (leader_election Rule 6) and
holds the range whole, so the client retries there instead of stepping over a gap. A leader alone in its
ISR serves around the fence (the next batch after it).
Rule 2: what a client sends never raises out of a handler: every per-topic or per-partition problem becomes
that entry's error code. An exception escaping a handler is a broker bug (the server closes the connection).
Rule 5: a Produce to a partition is admitted in one place, `produce.produce_target` (acks, internal topic,
leadership, fence, min.insync.replicas), for the general path, the one-partition fast path and a read's group
of them alike; what an append raises becomes an error code in one place too (error_codes Rule 1).
Rule 6: a Fetch of a partition is admitted in one place, `fetch.fetch_target` (leadership, fence, leader epoch,
Rule 4), and read in one (`fetch.read_records`: a follower past the HW, a consumer up to it), for the general
path, its long polls and the one-partition fast path (whose FileSlice the server sends with sendfile) alike.

Hot paths are per batch, not per record: Produce hands each partition's record set (a memoryview of the
request frame) to one `PartitionLog.append`; Fetch returns `FileSlice`s that the server sends with
`os.sendfile`. The common Produce (one partition, acks 0, 1 or all, led here) has a fast path that the dispatcher
tries first: `handle_single_partition_produce` over protocol.produce's one-partition decoder and encoder
(and `handle_produce_group` for a read's run of them, its replies encoded by protocol.produce_run),
answering byte for byte as handle_produce does (an acks=all write waits in the purgatory the same way), and
leaving everything else to it. A consumer's Fetch of one partition with records ready has one too:
`handle_single_partition_fetch` answers a response head built once (protocol.fetch's one-partition encoder)
and the FileSlice, byte for byte as handle_fetch, and leaves followers, errors and long polls to it. None of
them touches ZooKeeper: they look the partition up in the current `MetadataSnapshot`.

The group apis (JoinGroup ... DeleteGroups) are in coordinator/group/handlers.py, over `state.groups` (the group
coordinator); FindCoordinator, OffsetCommit and OffsetFetch are here, over `state.offsets` (offset_store.py:
`__consumer_offsets`, which FindCoordinator creates on demand). `__consumer_offsets` is internal
(offsets_topic.py Rule 2): Produce and DeleteTopics refuse it, Metadata flags it.
"""

from __future__ import annotations

from sparklog.broker.coordinator.group import consumer_handlers
from sparklog.broker.coordinator.group import handlers as group_handlers
from sparklog.broker.handlers.coordinators import (handle_find_coordinator, handle_init_producer_id, handle_offset_commit,
                                                   handle_offset_fetch)
from sparklog.broker.handlers.error_codes import *  # noqa: F403 - the codes, as handlers.X for the tests
from sparklog.broker.handlers.describe_topic_partitions import handle_describe_topic_partitions
from sparklog.broker.handlers.fetch import handle_fetch, handle_single_partition_fetch
from sparklog.broker.handlers.metadata import (handle_api_versions, handle_create_topics, handle_delete_topics,
                                               handle_metadata)
from sparklog.broker.handlers.offsets import handle_list_offsets, handle_offset_for_leader_epoch
from sparklog.broker.handlers.produce import handle_produce, handle_single_partition_produce
from sparklog.broker.handlers.state import BrokerState
from sparklog.protocol.api_keys import ApiKey

__all__ = ["HANDLERS", "BrokerState", "handle_fetch", "handle_list_offsets", "handle_metadata",
           "handle_offset_for_leader_epoch", "handle_produce", "handle_single_partition_fetch",
           "handle_single_partition_produce", "handle_create_topics"]


HANDLERS = {
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    **group_handlers.HANDLERS,
    **consumer_handlers.HANDLERS,
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: handle_describe_topic_partitions,
}


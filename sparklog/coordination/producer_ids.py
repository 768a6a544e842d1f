"""Producer ids for idempotent producers: blocks claimed from one ZooKeeper counter, as Kafka's ZK-mode
`ZkProducerIdManager` does.

    /latest_producer_id_block   {"version":1,"broker":1,"block_start":"1000","block_end":"1999"}

Rule 1: a block is claimed by a version-checked `set` (or `create` for the first block) of the node from the
block it last saw; whoever loses the race re-reads and claims the next block. So blocks never overlap and ids
are unique across brokers; within a process a lock makes them unique across threads.
Rule 2: a retry after a lost connection may find that its claim landed and claim another block: ids are
skipped, never repeated.

Transitions of an allocator: EMPTY --next_id() claims a block--> HAS_BLOCK --block used up--> EMPTY.
"""

from __future__ import annotations

import threading

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, encode, retrying

BLOCK_JSON_VERSION = 1
DEFAULT_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_PRODUCER_ID = 2**63 - 1


class ProducerIdsExhausted(RuntimeError):
    """The 64-bit producer id space is used up (Kafka: "Exhausted all producerIds")."""


class ProducerIdAllocator:
    """Hands out unique producer ids; thread-safe."""

    def __init__(self, zk: KazooClient, broker_id: int, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError("block_size must be at least 1")
        self.zk = zk
        self.broker_id = broker_id
        self.block_size = block_size
        self._lock = threading.Lock()
        self._next = 0
        self._end = -1  # inclusive end of the current block; below _next means no block

    def next_id(self) -> int:
        with self._lock:
            if self._next > self._end:
                self._next, self._end = retrying(self.zk, self._inner_claim_block)
            pid = self._next
            self._next += 1
            return pid

    def _inner_claim_block(self) -> tuple[int, int]:
        try:
            data, stat = self.zk.get(paths.PRODUCER_ID_BLOCK)
        except NoNodeError:
            data, stat = None, None
        start = 0 if data is None else int(decode(data)["block_end"]) + 1
        end = start + self.block_size - 1
        if end > MAX_PRODUCER_ID:
            raise ProducerIdsExhausted("exhausted all producer ids")
        value = encode(
            {"version": BLOCK_JSON_VERSION, "broker": self.broker_id, "block_start": str(start), "block_end": str(end)}
        )
        try:
            if stat is None:
                self.zk.create(paths.PRODUCER_ID_BLOCK, value, makepath=True)
            else:
                self.zk.set(paths.PRODUCER_ID_BLOCK, value, version=stat.version)
        except (BadVersionError, NodeExistsError):
            raise ForceRetryError() from None  # another allocator claimed this block: read again
        return start, end

import threading

from sparklog.coordination.connection import close, connect, decode
from sparklog.coordination.producer_ids import ProducerIdAllocator


def test_blocks_follow_each_other(zk):
    first = ProducerIdAllocator(zk, broker_id=1, block_size=3)
    second = ProducerIdAllocator(zk, broker_id=2, block_size=3)
    assert [first.next_id() for _ in range(2)] == [0, 1]
    assert second.next_id() == 3
    assert decode(zk.get("/latest_producer_id_block")[0]) == {
        "version": 1, "broker": 2, "block_start": "3", "block_end": "5",
    }
    assert [first.next_id() for _ in range(2)] == [2, 6]


def test_unique_across_allocators_and_threads(zk_connect):
    clients = [connect(zk_connect) for _ in range(3)]
    allocators = [ProducerIdAllocator(c, broker_id=i, block_size=5) for i, c in enumerate(clients)]
    ids, lock = [], threading.Lock()

    def run(allocator):
        mine = [allocator.next_id() for _ in range(40)]
        with lock:
            ids.extend(mine)

    threads = [threading.Thread(target=run, args=(a,)) for a in allocators for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        close(c)
    assert len(ids) == 240 == len(set(ids))

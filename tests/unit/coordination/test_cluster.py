import re
import threading

from sparklog.coordination import cluster
from sparklog.coordination.connection import close, connect, decode


def test_created_once_and_stable(zk):
    assert cluster.get_cluster_id(zk) is None
    first = cluster.get_or_create_cluster_id(zk)
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", first)
    assert cluster.get_or_create_cluster_id(zk) == first
    assert decode(zk.get("/cluster/id")[0]) == {"version": "1", "id": first}


def test_concurrent_callers_agree(zk_connect):
    clients = [connect(zk_connect) for _ in range(4)]
    ids, barrier = [], threading.Barrier(len(clients))

    def run(client):
        barrier.wait()
        ids.append(cluster.get_or_create_cluster_id(client))

    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        close(c)
    assert len(ids) == 4 and len(set(ids)) == 1


def test_ids_are_random():
    assert len({cluster.new_cluster_id() for _ in range(100)}) == 100

"""`fill` and `Producer.send_many`, the bulk path: the same batches, partitions and bytes as per-record sends."""

from __future__ import annotations

import random
from itertools import accumulate, count

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sparklog.client import Producer
from sparklog.client.accumulator import RECORD_OVERHEAD, BufferExhausted, RecordAccumulator
from sparklog.client.partitioner import partition_for_key
from sparklog.client import producer as producer_module
from sparklog.records import batch as batch_module
from support.client_fake_broker import FakeBroker
from support.codecs import NAMES, switched


def accumulator(batch_size, max_records, buffer_memory=1 << 20):
    return RecordAccumulator(batch_size, max_records, 60_000, buffer_memory, 100)


def drained(acc):
    acc.close_expired(0, force=True)
    return [(b.partition, b.records, b.size) for b in acc.ready]


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=60), batch_size=st.integers(61, 2000),
       max_records=st.integers(1, 20), already=st.integers(0, 5))
def test_fill_closes_batches_where_appends_would(sizes, batch_size, max_records, already):
    records = [(None, b"x" * s, None, 1) for s in sizes]
    one, bulk = accumulator(batch_size, max_records), accumulator(batch_size, max_records)
    for acc in (one, bulk):  # an open batch that is partly full already
        for _ in range(already):
            acc.append("t", 0, (None, b"", None, 1), 0)
    for record, size in zip(records, sizes):
        one.append("t", 0, record, size)
    ends = list(accumulate(s + RECORD_OVERHEAD for s in sizes))
    start = 0
    while start < len(records):
        start, _ = bulk.fill("t", 0, records, ends, start, len(records))
    assert drained(bulk) == drained(one)
    assert bulk.used_bytes == one.used_bytes


def test_fill_waits_for_memory_and_gives_up_after_max_block():
    acc = accumulator(10_000, 100, buffer_memory=500)
    records = [(None, b"x" * 100, None, 1)] * 10
    ends = list(accumulate([100 + RECORD_OVERHEAD] * 10))
    end, batch = acc.fill("t", 0, records, ends, 0, 10)
    assert 0 < end < 10 and acc.used_bytes <= 500  # no more at once than buffer.memory holds
    with pytest.raises(BufferExhausted):
        acc.fill("t", 0, records, ends, end, 10)
    acc.close_expired(0, force=True)
    acc.release_all(list(acc.ready))
    assert acc.fill("t", 0, records, ends, end, 10)[0] > end


rows = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)),  # value
                          st.one_of(st.none(), st.binary(min_size=1, max_size=8)),  # key
                          st.one_of(st.none(), st.integers(0, 3)),  # partition
                          st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=3), st.binary(max_size=3)),
                                                        min_size=1, max_size=2))),  # headers
                min_size=1, max_size=80)


@pytest.fixture(scope="module", params=NAMES)
def codec_name(request):
    """The producer's sender builds the batches with each codec, the compiled one and the pure-Python one."""
    with switched(request.param), pytest.MonkeyPatch.context() as patch:
        patch.setattr(producer_module, "build_batch", batch_module.build_batch)
        yield request.param


@pytest.fixture(scope="module")
def broker():
    with FakeBroker() as b:
        yield b


TOPICS = count(0, 2)  # a fresh pair of topics per example


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows, keyed=st.sampled_from(["none", "all", "mixed"]), with_partitions=st.booleans(),
       batch=st.integers(1, 7), seed=st.integers(0, 1000))
def test_send_many_puts_every_record_where_send_would(broker, codec_name, rows, keyed, with_partitions, batch, seed):
    """Same partition, order, batches and decoded bytes as one `send` per row, null keys (sticky) included."""
    values = [r[0] for r in rows]
    keys = None if keyed == "none" else [r[1] if keyed == "mixed" else (r[1] or b"k") for r in rows]
    partitions = [r[2] for r in rows] if with_partitions else None
    headers = [r[3] for r in rows]
    n = next(TOPICS)
    one, bulk = f"t{n}", f"t{n + 1}"
    broker.topics.update({one: 4, bulk: 4})
    settings_ = {"batch.num.messages": batch, "linger.ms": 60_000, "batch.size": 150}
    with Producer(broker.bootstrap, **settings_) as a, Producer(broker.bootstrap, **settings_) as b:
        a._partitioner._random, b._partitioner._random = random.Random(seed), random.Random(seed)
        for i, value in enumerate(values):
            a.send(one, value, key=keys[i] if keys else None, headers=headers[i],
                   partition=partitions[i] if partitions else None, timestamp=7)
        batches = b.send_many(bulk, values, keys=keys, headers=headers, partitions=partitions, timestamp=7)
        a.flush(5)
        b.flush(5)
    assert all(x.done() and x.error is None for x in batches)
    assert sum(len(x.records) for x in batches) == len(rows)
    for p in range(4):
        got = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in broker.records(bulk, p)]
        assert got == [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in broker.records(one, p)]
        assert [len(x) for x in broker.logs[(bulk, p)]] == [len(x) for x in broker.logs[(one, p)]]
    for i, key in enumerate(keys or []):  # keys land where murmur2 (Kafka, librdkafka) puts them
        if key is not None and not (partitions and partitions[i] is not None):
            assert any(r.value == values[i] and r.key == key for r in broker.records(bulk, partition_for_key(key, 4)))


def test_send_many_refuses_a_partition_the_topic_lacks_and_a_short_column(broker):
    broker.topics["t"] = 4
    with Producer(broker.bootstrap) as producer:
        with pytest.raises(ValueError, match="has no partition 4"):
            producer.send_many("t", [b"a", b"b"], partitions=[0, 4])
        with pytest.raises(ValueError, match="keys has 1 rows, values has 2"):
            producer.send_many("t", [b"a", b"b"], keys=[b"k"])
        with pytest.raises(TypeError, match="value must be bytes"):
            producer.send_many("t", [b"a", 3])


def test_the_sender_wakes_for_a_metadata_refresh_its_backoff_held_back():
    """A new topic's metadata, asked for while the previous answer was in flight, goes out when the backoff
    ends, not when `send`'s half-second poll next wakes the I/O thread (each Spark task paid 0.5 s)."""
    import time

    from sparklog.client.config import PRODUCER_DEFAULTS, resolve
    from sparklog.client.metadata import ClusterMetadata
    from sparklog.client.producer import Sender

    config = resolve(PRODUCER_DEFAULTS, {"enable.idempotence": False})
    metadata = ClusterMetadata()
    sender = Sender(None, metadata, accumulator(1000, 10), config)
    metadata.need_update, metadata.next_attempt = True, time.monotonic() + 60  # a minute: no stall of the test reaches it
    assert 30 < sender.run_once() <= 60  # the backoff's end, not None (the half-second poll)


def test_a_new_topic_is_asked_for_at_once_even_when_an_answer_without_it_was_in_flight():
    """metadata.py Rule 3: the ~0.1 s each Spark task's consumer waited for its topic's leader."""
    import time
    from types import SimpleNamespace

    from sparklog.client.metadata import ClusterMetadata

    metadata = ClusterMetadata()
    now = time.monotonic()
    metadata.in_progress, metadata.need_update, metadata.next_attempt = True, False, now + 0.1  # bootstrap request
    metadata.add_topic("t")
    broker = SimpleNamespace(node_id=1, host="h", port=1)
    metadata.update(SimpleNamespace(brokers=[broker], topics=[]))  # its answer: asked before "t" was added
    assert metadata.due(now)
    part = SimpleNamespace(partition_index=0, leader_id=1)
    metadata.in_progress = True
    metadata.update(SimpleNamespace(brokers=[broker], topics=[SimpleNamespace(name="t", error_code=0, partitions=[part])]))
    assert not metadata.due(now) and metadata.leader("t", 0) == 1
    metadata.request_update()  # a refresh in a row (NOT_LEADER...) is still spaced by the backoff
    metadata.next_attempt = now + 0.1
    assert not metadata.due(now)

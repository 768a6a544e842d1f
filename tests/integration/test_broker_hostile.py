"""A live broker subprocess under hostile frames keeps answering a well-behaved client."""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time

import pytest

from support.cluster import Cluster

pytestmark = pytest.mark.slow

SIZE = struct.Struct(">i")


@pytest.fixture
def one(request, zk_connect, tmp_path):
    c = Cluster(zk_connect, tmp_path, brokers=1, overrides={"socket.request.max.bytes": "1048576"})
    request.addfinalizer(c.stop)
    return c.start()


def valid_frames() -> list[bytes]:
    from sparklog.protocol import (ApiKey, ApiVersionsRequest, FetchPartition, FetchRequest, FetchTopic,
                                   MetadataRequest, MetadataRequestTopic, PartitionProduceData,
                                   ProduceRequest, TopicProduceData)
    from sparklog.protocol.registry import encode_request
    from sparklog.records.batch import build_batch

    return [
        encode_request(ApiKey.API_VERSIONS, 3, 1, "h", ApiVersionsRequest(client_software_name="x")),
        encode_request(ApiKey.METADATA, 8, 2, "h", MetadataRequest(topics=[MetadataRequestTopic(name="hostile")])),
        encode_request(ApiKey.PRODUCE, 8, 3, "h", ProduceRequest(acks=1, timeout_ms=100, topic_data=[
            TopicProduceData(name="hostile", partition_data=[PartitionProduceData(
                index=0, records=build_batch([(b"k", b"v", None, None)]))])])),
        encode_request(ApiKey.FETCH, 11, 4, "h", FetchRequest(max_wait_ms=10, min_bytes=1, topics=[
            FetchTopic(topic="hostile", partitions=[FetchPartition(partition=0, fetch_offset=0,
                                                                   partition_max_bytes=1000)])])),
    ]


def hostile_payloads(rng: random.Random):
    frames = valid_frames()
    while True:
        kind = rng.randrange(5)
        if kind == 0:
            yield os.urandom(rng.randrange(1, 300))
        elif kind == 1:
            yield SIZE.pack(rng.choice([2**31 - 1, 1048577, -1, -(2**31)])) + os.urandom(50)
        elif kind == 2:
            frame = frames[rng.randrange(len(frames))]
            yield frame[: rng.randrange(1, len(frame))]  # truncated, then the socket closes
        else:  # a valid frame with a few bytes flipped (the size prefix kept)
            frame = bytearray(frames[rng.randrange(len(frames))])
            for _ in range(rng.randrange(1, 6)):
                frame[rng.randrange(4, len(frame))] = rng.randrange(256)
            yield bytes(frame)


def test_hostile_frames_do_not_stop_a_live_broker(one):
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = one.brokers[1]
    host, port = broker.host, broker.port
    stop = threading.Event()
    sent = [0]

    def attack(seed):
        rng = random.Random(seed)
        for payload in hostile_payloads(rng):
            if stop.is_set():
                return
            try:
                with socket.create_connection((host, port), timeout=0.5) as sock:
                    sock.sendall(payload)
                    sock.shutdown(socket.SHUT_WR)
                    while sock.recv(65536):
                        pass
            except OSError:
                pass
            sent[0] += 1

    attackers = [threading.Thread(target=attack, args=(seed,)) for seed in range(3)]
    for t in attackers:
        t.start()
    try:
        producer = Producer({"bootstrap.servers": broker.address, "acks": "all"})
        values = [b"good-%d" % i for i in range(500)]
        for v in values:
            producer.produce("well-behaved", value=v, partition=0)
            producer.poll(0)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "wb", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("well-behaved", 0, 0)])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < len(values) and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    got.append(m.value())
        finally:
            consumer.close()
        assert got == values
        deadline = time.monotonic() + 30
        while sent[0] < 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        # still answering after the attack
        from support.wire import request
        from sparklog.protocol import ApiKey, ApiVersionsRequest
        assert request(host, port, ApiKey.API_VERSIONS, 3, ApiVersionsRequest()).error_code == 0
    finally:
        stop.set()
        for t in attackers:
            t.join(30)
    assert sent[0] >= 200
    assert broker.running
    assert "Traceback" not in broker.tail(100_000)

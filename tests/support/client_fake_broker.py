"""A scriptable in-process broker for the client's unit tests, speaking the shared codec.

It serves Metadata (itself as node 0, leading every partition of the topics it knows), Produce (appends to
in-memory partition logs, assigning offsets; it checks no sequence numbers), InitProducerId and ListOffsets, and answers everything else with whatever
`handlers[api_key](request)` returns. Misbehaviour is scripted: `produce_errors` (error codes to answer before
succeeding), `hold` (collect requests without answering until released), `swap_correlation` and
`close_after`. Every socket and thread it opens is closed by `stop()` (use it as a context manager).
"""

from __future__ import annotations

import socket
import threading
from collections import defaultdict

from sparklog.protocol import (ApiKey, FrameDecoder, InitProducerIdResponse, ListOffsetsPartitionResponse, ListOffsetsResponse,
                               ListOffsetsTopicResponse, MetadataResponse, MetadataResponseBroker,
                               MetadataResponsePartition, MetadataResponseTopic, PartitionProduceResponse,
                               ProduceResponse, TopicProduceResponse, decode_request, encode_response)
from sparklog.protocol.frame import NEED_DATA
from sparklog.records.batch import iter_batches, set_base_offset


class FakeBroker:
    def __init__(self, topics: dict[str, int] | None = None) -> None:
        self.topics = dict(topics or {})
        self.logs: dict[tuple[str, int], list[bytes]] = defaultdict(list)  # batches as appended
        self.next_offset: dict[tuple[str, int], int] = defaultdict(int)
        self.requests: list = []
        self.produce_errors: list[int] = []
        self.handlers: dict = {}
        self.hold = False
        self.held: list = []
        self.swap_correlation = False
        self.close_after: int | None = None  # close the connection after this many requests
        self.producer_ids = 999  # the last producer id InitProducerId handed out
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.05)  # accept() wakes up to notice stop()
        self.port = self._server.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopped = False
        self._accept = threading.Thread(target=self._accept_loop, daemon=True)
        self._accept.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept_loop(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.settimeout(None)
            self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        served = 0
        try:
            while not self._stopped:
                data = conn.recv(1 << 20)
                if not data:
                    return
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    request = decode_request(bytes(frame))
                    served += 1
                    with self._lock:  # release() answers held requests under it: replies stay in order
                        self.requests.append(request)
                        if self.close_after is not None and served > self.close_after:
                            conn.close()
                            return
                        if self.hold:
                            self.held.append((conn, request))
                            continue
                    self._answer(conn, request)
        except OSError:
            return

    def release(self) -> None:
        """Answer every held request, in arrival order."""
        with self._lock:
            held, self.held = self.held, []
            for conn, request in held:
                self._answer(conn, request)
            self.hold = False

    def _answer(self, conn: socket.socket, request) -> None:
        body = self._respond(request)
        if body is None:
            return
        header = request.header
        if self.swap_correlation:
            header.correlation_id += 1
        try:
            conn.sendall(b"".join(bytes(c) for c in encode_response(header, body)))
        except OSError:  # the client closed the connection (as it must after a bad correlation id)
            pass

    def _respond(self, request):
        handler = self.handlers.get(request.api_key)
        if handler is not None:
            return handler(request)
        if request.api_key == ApiKey.METADATA:
            return self._metadata(request.body)
        if request.api_key == ApiKey.PRODUCE:
            return self._produce(request.body)
        if request.api_key == ApiKey.LIST_OFFSETS:
            return self._list_offsets(request.body)
        if request.api_key == ApiKey.INIT_PRODUCER_ID:
            self.producer_ids += 1
            return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=self.producer_ids,
                                          producer_epoch=0)
        raise AssertionError(f"FakeBroker got an unexpected {request}")

    def _metadata(self, body) -> MetadataResponse:
        names = list(self.topics) if body.topics is None else [t.name for t in body.topics]
        topics = []
        for name in names:
            if name not in self.topics:
                topics.append(MetadataResponseTopic(error_code=3, name=name, partitions=[]))
                continue
            topics.append(MetadataResponseTopic(error_code=0, name=name, partitions=[
                MetadataResponsePartition(error_code=0, partition_index=p, leader_id=0, replica_nodes=[0],
                                          isr_nodes=[0], offline_replicas=[]) for p in range(self.topics[name])]))
        return MetadataResponse(brokers=[MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)],
                                cluster_id="fake", controller_id=0, topics=topics)

    def _produce(self, body):
        responses = []
        for topic in body.topic_data:
            parts = []
            for part in topic.partition_data:
                tp = (topic.name, part.index)
                if self.produce_errors:
                    code = self.produce_errors.pop(0)
                    parts.append(PartitionProduceResponse(index=part.index, error_code=code, base_offset=-1))
                    continue
                base = self.next_offset[tp]
                for batch in iter_batches(bytes(part.records)):
                    raw = bytearray(batch.raw)
                    set_base_offset(raw, self.next_offset[tp])
                    self.logs[tp].append(bytes(raw))
                    self.next_offset[tp] += batch.record_count
                parts.append(PartitionProduceResponse(index=part.index, error_code=0, base_offset=base))
            responses.append(TopicProduceResponse(name=topic.name, partition_responses=parts))
        return None if body.acks == 0 else ProduceResponse(responses=responses)

    def _list_offsets(self, body) -> ListOffsetsResponse:
        topics = []
        for topic in body.topics:
            parts = [ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=0, timestamp=-1,
                                                  offset=0 if p.timestamp == -2 else self.next_offset[(topic.name, p.partition_index)])
                     for p in topic.partitions]
            topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=parts))
        return ListOffsetsResponse(topics=topics)

    def records(self, topic: str, partition: int) -> list:
        from sparklog.records.batch import iter_records

        return list(iter_records(b"".join(self.logs[(topic, partition)])))

    def produce_requests(self) -> list:
        return [r for r in self.requests if r.api_key == ApiKey.PRODUCE]

    def stop(self) -> None:
        self._stopped = True
        self._server.close()
        for conn in self._conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in recv()
            except OSError:
                pass
            try:
                conn.close()
            except OSError:
                pass
        for thread in self._threads:
            thread.join(5)
        self._accept.join(5)

    def __enter__(self) -> "FakeBroker":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

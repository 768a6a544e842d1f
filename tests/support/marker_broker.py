"""A real broker process that also writes end-transaction markers on request, as the transaction coordinator's
WriteTxnMarkers will (until that lands): for the read_committed tests of real brokers.

`MarkerBroker` is a `BrokerProcess` whose command runs this file with `sparklog broker start`'s arguments: the
same broker (`sparklog.broker.app.Broker`), plus a thread serving a Unix socket `<log_dir>/../markers-<id>.sock`.
Each line sent is a JSON object {topic, partition, producer_id, producer_epoch, commit, coordinator_epoch};
the broker appends the marker to the partition it leads, on its event loop, with
`PartitionLog.append_control_batch` in its current leader epoch, and answers one line: {"offset": n} or
{"error": "..."} (not the leader, a fenced epoch). SIGKILL and restarts are the BrokerProcess's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
import threading
from pathlib import Path

from sparklog.broker.launcher import BrokerProcess

ANSWER_TIMEOUT_S = 30.0


class MarkerBroker(BrokerProcess):
    """A BrokerProcess that writes markers on request (module docstring)."""

    @property
    def socket_path(self) -> Path:
        return self.log_dir.parent / f"markers-{self.broker_id}.sock"

    def command(self) -> list[str]:
        start = super().command().index("start") + 1
        return [sys.executable, __file__, str(self.socket_path)] + super().command()[start:]

    def write_marker(self, topic: str, partition: int, producer_id: int, commit: bool, producer_epoch: int = 0,
                     coordinator_epoch: int = 0) -> int:
        """Append the marker on this broker (its partition's leader); its offset, or RuntimeError(why)."""
        line = json.dumps(dict(topic=topic, partition=partition, producer_id=producer_id, commit=commit,
                               producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch))
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(ANSWER_TIMEOUT_S)
            sock.connect(str(self.socket_path))
            sock.sendall(line.encode() + b"\n")
            answer = json.loads(sock.makefile().readline())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["offset"]


def _append(broker, request: dict) -> dict:
    """On the broker's loop: the marker appended by the partition's leader here."""
    state = broker.dispatcher.state
    led = state.replicas.leader_of(state.partitions.snapshot, (request["topic"], request["partition"]))
    if led is None:
        return {"error": f"{request['topic']}-{request['partition']} is not led here"}
    try:
        offset = led.plog.append_control_batch(request["producer_id"], request["producer_epoch"], request["commit"],
                                               request["coordinator_epoch"], led.leader_epoch)
    except Exception as exc:  # noqa: BLE001 - answered to the test, one line
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"offset": offset}


def _serve(broker, path: str) -> None:
    if os.path.exists(path):
        os.unlink(path)  # a killed predecessor's
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()
    while True:
        conn, _ = server.accept()
        with conn:
            request = json.loads(conn.makefile().readline())

            async def on_loop(request=request):
                return _append(broker, request)

            answer = asyncio.run_coroutine_threadsafe(on_loop(), broker.loop).result(ANSWER_TIMEOUT_S)
            conn.sendall(json.dumps(answer).encode() + b"\n")


def main(argv: list[str]) -> int:
    from sparklog.broker.app import Broker
    from sparklog.broker.commands import broker_properties
    from sparklog.broker.config import BrokerConfig
    from sparklog.cli import build_parser

    path, args = argv[0], build_parser().parse_args(["broker", "start", *argv[1:]])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    broker = Broker(BrokerConfig.from_properties(broker_properties(args)))
    threading.Thread(target=_serve, args=(broker, path), daemon=True, name="markers").start()
    broker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

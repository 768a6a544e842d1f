"""SASL connection set-up time: how long a client waits from connect() until its connection may carry requests,
p50 and p99, for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 on a SASL_PLAINTEXT broker, beside a baseline measured in
the same run: the same set-up on a PLAINTEXT broker (connect + ApiVersions, as every client does first).

    .venv/bin/python benchmarks/sasl_setup.py [-n 200]

Two real brokers (subprocesses, one ZooKeeper: the launcher's LocalCluster) on this machine; the client is
sparklog's own login (client/sasl.py) on a blocking socket, one connection after the other. A SCRAM login costs
PBKDF2 with 4096 iterations (Kafka's minimum) on the client and nothing of the kind on the broker, which keeps
the salted keys (the client derives its key from the password on every login, as librdkafka does). Prints
milliseconds and the ratio of each to the baseline's p50, and the load average. `setup_times(...)` is the function
for the integrator's benchmarks/security.py.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

from sparklog.client.sasl import SaslLogin, authenticate
from sparklog.protocol import ApiKey, ApiVersionsRequest
from sparklog.protocol.registry import decode_response, encode_request

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-pw" user_admin="admin-pw" user_bench="bench-pw";')
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-pw";'
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def sasl_properties() -> dict:
    props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": ",".join(MECHANISMS),
             "sasl.mechanism.inter.broker.protocol": "PLAIN", "offsets.topic.replication.factor": "1"}
    for mechanism in MECHANISMS:
        props[f"listener.name.sasl_plaintext.{mechanism.lower()}.sasl.jaas.config"] = (
            PLAIN_JAAS if mechanism == "PLAIN" else SCRAM_JAAS)
    return props


def _api_versions(sock: socket.socket) -> None:
    sock.sendall(encode_request(ApiKey.API_VERSIONS, 3, 1, "bench", ApiVersionsRequest(
        client_software_name="bench", client_software_version="1")))
    size = int.from_bytes(_read(sock, 4), "big")
    decode_response(ApiKey.API_VERSIONS, 3, _read(sock, size))


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def setup_times(address: tuple[str, int], login: SaslLogin | None, n: int) -> list[float]:
    """Seconds of `n` set-ups (connect, ApiVersions, then the SASL login if any), one after the other."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        with socket.create_connection(address, timeout=30) as sock:
            _api_versions(sock)
            if login is not None:
                authenticate(sock, login, "bench", "bench")
            times.append(time.perf_counter() - start)
    return times


def _percentiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=200, help="set-ups per row")
    args = parser.parse_args(argv)
    from sparklog.broker.launcher import BrokerProcess, LocalCluster
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.scram_credentials import store_credential

    with tempfile.TemporaryDirectory() as base, LocalCluster(Path(base) / "plain", brokers=1) as plain:
        zk = connect(plain.zookeeper)
        for mechanism in MECHANISMS[1:]:
            store_credential(zk, "bench", mechanism, "bench-pw", 4096)
        close(zk)
        sasl = BrokerProcess(2, plain.zookeeper, Path(base) / "sasl" / "logs", sasl_properties()).start()
        try:
            host, port = plain.bootstrap.split(",")[0].rsplit(":", 1)
            baseline = setup_times((host, int(port)), None, args.n)
            rows = [("PLAINTEXT baseline", baseline)] + [
                (mechanism, setup_times(("127.0.0.1", sasl.port), SaslLogin(mechanism, "bench", "bench-pw"), args.n))
                for mechanism in MECHANISMS]
        finally:
            sasl.stop()
    base_p50 = _percentiles(baseline)[0]
    print(f"connection set-up, n={args.n} each, load average {os.getloadavg()[0]:.2f}")
    print(f"{'':22}{'p50 ms':>10}{'p99 ms':>10}{'p50 / baseline':>16}")
    for name, times in rows:
        p50, p99 = _percentiles(times)
        print(f"{name:22}{p50:10.2f}{p99:10.2f}{p50 / base_p50:16.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Brokers as real local subprocesses: start N on free ports, wait until registered, stop or kill them.

Used by `sparklog demo`, the notebook and the integration tests; production brokers are started with
`sparklog broker start` by whatever supervises them.

Rule 1: every process started here is stopped by `stop()`/`kill()`, by the context manager, or, as a last
resort, at interpreter exit; callers use the `Cluster` / `LocalCluster` context managers.
Rule 2: `start()` returns once the broker has printed its READY line (it is registered in ZooKeeper and
listening); otherwise it raises `BrokerStartError` with the tail of the broker's log.

    with Cluster(zk_connect, tmp_path, brokers=3) as cluster:
        cluster.bootstrap        # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        cluster.brokers[1].kill()      # SIGKILL
        cluster.brokers[1].start()     # same id, same log dir, same port
        cluster.brokers[1].api_matrix()  # {"served": {client: {api: [versions]}}, "refused": {...}}
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import subprocess
import sys
import time
import weakref
import threading
from pathlib import Path

from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper, ZooKeeperEnsemble, die_with_parent

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
LOG_TAIL_CHARS = 4000
# The broker prints this line (see sparklog.broker.app) once it is registered and listening.
READY = re.compile(r"^sparklog broker (\d+) ready on (\S+):(\d+)$", re.M)

# The broker logs this (sparklog.broker.app.API_MATRIX_MARKER) on SIGUSR1 and at shutdown.
API_MATRIX = re.compile(r"api versions served: (\{.*\})$", re.M)
API_MATRIX_TIMEOUT_S = 10.0
# ... and this (sparklog.broker.app.STATISTICS_MARKER), on the same occasions, just before it.
STATISTICS = re.compile(r"broker statistics: (\{.*\})$", re.M)
# ... and this (sparklog.broker.app.LISTENER_MARKER) once per listener as it binds it.
LISTENER = re.compile(r" listener (\S+) on \S+:(\d+) \((\S+)\), advertised as (\S+):(\d+)$", re.M)

_LIVE: "weakref.WeakSet[BrokerProcess]" = weakref.WeakSet()


class BrokerStartError(RuntimeError):
    pass


class BrokerProcess:
    """One `sparklog broker start` subprocess; its output goes to `<log_dir>/../broker-<id>.out`."""

    def __init__(self, broker_id: int, zk_connect: str, log_dir: Path, overrides: dict | None = None,
                 port: int = 0, host: str = "127.0.0.1") -> None:
        self.broker_id = broker_id
        self.zk_connect = zk_connect
        self.log_dir = Path(log_dir)
        self.overrides = dict(overrides or {})
        self.host = host
        self.port = port  # 0 until the first start picks one; restarts reuse it
        self.proc: subprocess.Popen | None = None
        self.out_path = self.log_dir.parent / f"broker-{broker_id}.out"
        self._out = None
        _LIVE.add(self)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "sparklog.cli", "broker", "start", "--id", str(self.broker_id),
               "--host", self.host, "--port", str(self.port), "--log-dir", str(self.log_dir),
               "--zookeeper", self.zk_connect]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = START_TIMEOUT_S) -> "BrokerProcess":
        if self.running:
            raise RuntimeError(f"broker {self.broker_id} is already running")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        start_at = self.out_path.stat().st_size if self.out_path.exists() else 0
        self._out = open(self.out_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.command(), stdout=self._out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                     preexec_fn=_die_with_parent_if_main_thread())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = READY.search(self._read_from(start_at))
            if match:
                self.port = int(match.group(3))
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise BrokerStartError(
            f"broker {self.broker_id} did not become ready (exit code {self.proc.returncode}):\n{self.tail()}")

    def listeners(self) -> dict[str, tuple[str, int, str]]:
        """The listeners of the broker's latest start: {name: (advertised host, port, security protocol)}."""
        found = {}
        for name, _, protocol, host, port in LISTENER.findall(self._read_from(0)):
            found[name] = (host, int(port), protocol)  # a restart's lines come later and win
        return found

    def api_matrix(self, timeout: float = API_MATRIX_TIMEOUT_S) -> dict:
        """The (api, version) pairs this broker served per client: asks a running broker (SIGUSR1) and
        returns what it logs; for a stopped broker, what it logged at shutdown."""
        return self._report(API_MATRIX, "api matrix", timeout)

    def statistics(self, timeout: float = API_MATRIX_TIMEOUT_S) -> dict:
        """The broker's server statistics (`{"server": {"handler_errors": .., "connections_open": ..}}`),
        asked for and read as `api_matrix` is."""
        return self._report(STATISTICS, "statistics", timeout)

    def _report(self, pattern: re.Pattern, what: str, timeout: float) -> dict:
        if not self.running:
            found = pattern.findall(self._read_from(0))
            if not found:
                raise RuntimeError(f"broker {self.broker_id} logged no {what}:\n{self.tail()}")
            return json.loads(found[-1])
        start_at = self.out_path.stat().st_size
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = pattern.findall(self._read_from(start_at))
            if found:
                return json.loads(found[-1])
            time.sleep(0.02)
        raise RuntimeError(f"broker {self.broker_id} did not log its {what}:\n{self.tail()}")

    def _read_from(self, position: int) -> str:
        with open(self.out_path, "rb") as f:
            f.seek(position)
            return f.read().decode("utf-8", "replace")

    def tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            return self.out_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait (clean shutdown); SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_out()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, as `kill -9`: no deregistration, no flush."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_out()

    def _close_out(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


def _die_with_parent_if_main_thread():
    """PR_SET_PDEATHSIG follows the thread that forked, so only a main-thread child can rely on it."""
    on_main = threading.current_thread() is threading.main_thread()
    return die_with_parent if sys.platform == "linux" and on_main else None


class Cluster:
    """N brokers sharing one ZooKeeper (chroot) connect string; log dirs under `base_dir`."""

    def __init__(self, zk_connect: str, base_dir: Path, brokers: int = 1, overrides: dict | None = None,
                 first_id: int = 1) -> None:
        self.zk_connect = zk_connect
        self.brokers = {
            i: BrokerProcess(i, zk_connect, Path(base_dir) / f"broker-{i}" / "logs", overrides)
            for i in range(first_id, first_id + brokers)
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers.values() if b.running)

    def start(self) -> "Cluster":
        try:
            for broker in self.brokers.values():
                broker.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.stop()

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class LocalCluster(Cluster):
    """An embedded ZooKeeper (or a replicated ensemble of `zookeepers` servers) and N brokers under
    `base_dir`: the whole system on one machine.

        with LocalCluster(base_dir, brokers=3) as cluster:
            cluster.zookeeper       # "127.0.0.1:PORT" ("h:p1,h:p2,h:p3" for an ensemble)
            cluster.bootstrap       # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
    """

    def __init__(self, base_dir: Path, brokers: int = 3, overrides: dict | None = None,
                 zookeeper_port: int = 0, zookeepers: int = 1, before_brokers=None) -> None:
        """`before_brokers(connect_string)`, if given, runs once ZooKeeper serves and before any broker starts
        (SCRAM credentials are stored then, as Kafka bootstraps them)."""
        self.base_dir = Path(base_dir)
        self.before_brokers = before_brokers
        self.zk_server: EmbeddedZooKeeper | ZooKeeperEnsemble
        if zookeepers > 1:
            self.zk_server = ZooKeeperEnsemble(zookeepers, self.base_dir / "zookeeper")
        else:
            self.zk_server = EmbeddedZooKeeper(port=zookeeper_port, data_dir=str(self.base_dir / "zookeeper"))
        super().__init__("", self.base_dir, brokers=brokers, overrides=overrides)

    @property
    def zookeeper(self) -> str:
        return self.zk_server.connect_string

    def start(self) -> "LocalCluster":
        self.zk_server.start()
        for broker in self.brokers.values():
            broker.zk_connect = self.zookeeper
        try:
            if self.before_brokers is not None:
                self.before_brokers(self.zookeeper)
            super().start()
        except BaseException:
            self.zk_server.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self.zk_server.stop()


@atexit.register
def _kill_leftovers() -> None:
    for broker in list(_LIVE):
        try:
            broker.kill()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass

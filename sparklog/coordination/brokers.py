"""The broker registry: one ephemeral znode per live broker at `/brokers/ids/<id>` (paper 3.2, design notes 5.5).

Value, Kafka's ZK-mode BrokerInfo JSON (version 5)::

    {"version":5,"host":"h","port":9092,"endpoints":["PLAINTEXT://h:9092"],
     "listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"jmx_port":-1,
     "timestamp":"1700000000000","rack":null,"features":{}}

with one endpoint per listener (`endpoints`, `listener_security_protocol_map`); `host`/`port` are the
PLAINTEXT listener's (null/-1 when none), as Kafka writes them; `BrokerInfo.address(listener)` reads them.

`BrokerRegistration` state transitions (the session listener runs on kazoo's thread and only flips flags and
wakes the registration's own thread, which does all the ZooKeeper calls):

    NEW        --register()------------------------------------> REGISTERED
    NEW        --register(), id held by another live session---> BrokerIdInUse raised (still NEW); with
                                                                 `wait` > 0 it first waits that long for the
                                                                 other session's node to go
    REGISTERED --SUSPENDED (connection lost, session may live)-> SUSPENDED: `active` is False, stop acting
    SUSPENDED  --CONNECTED (same session)-----------------------> REGISTERED: our node never went away
    REGISTERED|SUSPENDED --LOST (session expired)---------------> LOST: the server deleted our node
    LOST       --CONNECTED (new session), thread re-registers--> REGISTERED
    LOST       --CONNECTED, id taken by another broker meanwhile-> CONFLICT (terminal; `on_conflict` called)
    any        --close()------------------------------------------> CLOSED: node deleted if ours, thread joined

Idempotence: a create that fails with NodeExistsError is success when the node's `ephemeralOwner` is our own
session id (our create reached the server before the connection dropped).
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch
from kazoo.retry import ForceRetryError

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, encode, retrying
from sparklog.coordination.watch import Watch

BROKER_INFO_VERSION = 5  # Kafka's BrokerInfo JSON version with rack and features
DEFAULT_LISTENER = "PLAINTEXT"
NO_JMX_PORT = -1


class BrokerIdInUse(RuntimeError):
    """Another live ZooKeeper session holds `/brokers/ids/<id>`: two brokers are configured with one id."""


class RegistrationState(enum.Enum):
    NEW = "NEW"
    REGISTERED = "REGISTERED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"
    CONFLICT = "CONFLICT"
    CLOSED = "CLOSED"


@dataclass(frozen=True)
class BrokerInfo:
    """What consumers and clients need to know about a live broker."""

    id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[str, ...] = field(default=())  # "NAME://host:port", one per listener

    def address(self, listener: str) -> tuple[str, int] | None:
        """The host and port of the named listener's endpoint; with no endpoints registered (an older
        broker's node), `host`/`port` for PLAINTEXT. None when the broker has no such listener."""
        prefix = f"{listener}://"
        for endpoint in self.endpoints:
            if endpoint.upper().startswith(prefix.upper()):
                host, _, port = endpoint[len(prefix):].rpartition(":")
                return host.strip("[]"), int(port)
        if not self.endpoints and listener == DEFAULT_LISTENER:
            return self.host, self.port
        return None


@dataclass(frozen=True)
class RegistrationStatistics:
    state: RegistrationState
    registrations: int  # successful (re-)registrations, the first one included
    last_error: str | None


def broker_info_json(broker_id: int, host: str, port: int, rack: str | None = None,
                     listeners: dict[str, tuple[str, int, str]] | None = None) -> dict:
    """Kafka's BrokerInfo JSON. `listeners`: {name: (host, port, security protocol)}, default one PLAINTEXT
    listener at host:port; `host`/`port` are those of the listener speaking PLAINTEXT (null/-1 if none),
    as Kafka writes them for readers that know no endpoints."""
    listeners = listeners or {DEFAULT_LISTENER: (host, port, DEFAULT_LISTENER)}
    plain = next((v for v in listeners.values() if v[2] == DEFAULT_LISTENER), (None, -1, None))
    return {
        "version": BROKER_INFO_VERSION,
        "host": plain[0],
        "port": plain[1],
        "endpoints": [_endpoint(name, h, p) for name, (h, p, _) in listeners.items()],
        "listener_security_protocol_map": {name: value[2] for name, value in listeners.items()},
        "jmx_port": NO_JMX_PORT,
        "timestamp": str(int(time.time() * 1000)),
        "rack": rack,
        "features": {},
    }


def for_listener(brokers: dict[int, BrokerInfo], listener: str) -> dict[int, BrokerInfo]:
    """The brokers as a client that came in on `listener` must reach them: host and port of that listener's
    endpoint; a broker without such a listener is left out (as Kafka's metadata does). "" (a caller with no
    listener): the brokers unchanged."""
    if not listener:
        return brokers
    seen = {}
    for broker_id, info in brokers.items():
        address = info.address(listener)
        if address is not None:
            seen[broker_id] = dataclasses.replace(info, host=address[0], port=address[1])
    return seen


def _endpoint(name: str, host: str, port: int) -> str:
    return f"{name}://[{host}]:{port}" if ":" in host else f"{name}://{host}:{port}"


def parse_broker_info(broker_id: int, data: bytes) -> BrokerInfo:
    """host/port: the PLAINTEXT listener's, else the first endpoint's (a broker with no plaintext listener)."""
    value = decode(data)
    endpoints = tuple(value.get("endpoints", ()))
    info = BrokerInfo(broker_id, value["host"] or "", int(value["port"]), value.get("rack"), endpoints)
    if value["host"] is None and endpoints:
        host, port = info.address(endpoints[0].partition("://")[0])
        info = dataclasses.replace(info, host=host, port=port)
    return info


class BrokerRegistration:
    """Keeps `/brokers/ids/<broker_id>` present while this process is a live broker.

    `active` is what the broker checks before acting as a cluster member: it is False while the ZooKeeper
    connection is suspended or the session is lost. `on_conflict(exc)` is called (on the registration's
    thread) if, after a session loss, another broker has taken the id.
    """

    def __init__(
        self,
        zk: KazooClient,
        broker_id: int,
        host: str,
        port: int,
        rack: str | None = None,
        on_conflict: Callable[[BrokerIdInUse], None] | None = None,
        listeners: dict[str, tuple[str, int, str]] | None = None,
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.path = paths.broker(broker_id)
        self.host, self.port, self.rack = host, port, rack
        self.listeners = listeners  # {name: (host, port, protocol)}: broker_info_json
        self.on_conflict = on_conflict
        self._state = RegistrationState.NEW
        self._registrations = 0
        self._last_error: str | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> RegistrationState:
        return self._state

    @property
    def active(self) -> bool:
        return self._state is RegistrationState.REGISTERED

    def statistics(self) -> RegistrationStatistics:
        return RegistrationStatistics(self._state, self._registrations, self._last_error)

    def register(self, wait: float = 0.0) -> None:
        """Create the ephemeral node; raise `BrokerIdInUse` if another session holds it for `wait` seconds.

        A restarted broker (after kill -9) passes a `wait` a little longer than the session timeout, so that
        the dead process's node has expired by then.
        """
        if self._state is not RegistrationState.NEW:
            raise RuntimeError(f"register() on a {self._state.value} registration")
        deadline = time.monotonic() + wait
        while True:
            try:
                retrying(self.zk, self._inner_register)
                break
            except BrokerIdInUse:
                if not self._wait_for_node_gone(deadline - time.monotonic()):
                    raise
        with self._lock:
            self._state = RegistrationState.REGISTERED
        self.zk.add_listener(self._on_session_state)
        self._thread = threading.Thread(target=self._run, name=f"broker-registration-{self.broker_id}", daemon=True)
        self._thread.start()

    def _inner_register(self) -> None:
        data = encode(broker_info_json(self.broker_id, self.host, self.port, self.rack, self.listeners))
        self.zk.ensure_path(paths.BROKER_IDS)
        try:
            self.zk.create(self.path, data, ephemeral=True)
        except NodeExistsError:
            try:
                _, stat = self.zk.get(self.path)
            except NoNodeError:  # its owner's session ended in between: create again
                raise ForceRetryError() from None
            if stat.ephemeralOwner != self.zk.client_id[0]:
                raise BrokerIdInUse(
                    f"broker id {self.broker_id} is registered by another live ZooKeeper session "
                    f"(0x{stat.ephemeralOwner:x}); is a second broker configured with this id?"
                ) from None
        self._registrations += 1

    def _wait_for_node_gone(self, timeout: float) -> bool:
        if timeout <= 0:
            return False
        gone = threading.Event()
        if retrying(self.zk, self.zk.exists, self.path, watch=lambda event: gone.set()) is None:
            return True
        return gone.wait(timeout)

    def _on_session_state(self, state: KazooState) -> bool | None:
        """Kazoo's session listener: runs on kazoo's thread, so it only records the state and wakes `_run`."""
        with self._lock:
            if self._state in (RegistrationState.CLOSED, RegistrationState.CONFLICT):
                return True  # removes this listener
            if state is KazooState.SUSPENDED and self._state is RegistrationState.REGISTERED:
                self._state = RegistrationState.SUSPENDED
            elif state is KazooState.LOST:
                self._state = RegistrationState.LOST
            elif state is KazooState.CONNECTED and self._state is RegistrationState.SUSPENDED:
                self._state = RegistrationState.REGISTERED
            elif state is KazooState.CONNECTED and self._state is RegistrationState.LOST:
                self._wake.set()
        return None

    def _run(self) -> None:
        """The registration's thread: re-registers after a session loss, until closed."""
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                if self._state is RegistrationState.CLOSED:
                    return
                if self._state is not RegistrationState.LOST or not self.zk.connected:
                    continue
            self._reregister()

    def _reregister(self) -> None:
        try:
            retrying(self.zk, self._inner_register)
        except BrokerIdInUse as exc:
            with self._lock:
                self._state = RegistrationState.CONFLICT
                self._last_error = str(exc)
            if self.on_conflict is not None:
                self.on_conflict(exc)
            return
        except Exception as exc:  # noqa: BLE001 - retry budget exhausted: wait for the next CONNECTED
            self._last_error = f"{type(exc).__name__}: {exc}"
            return
        with self._lock:
            if self._state is RegistrationState.LOST:
                self._state = RegistrationState.REGISTERED

    def close(self) -> None:
        """Delete our node (if it is still ours), stop the thread and the listener. Idempotent."""
        with self._lock:
            was = self._state
            self._state = RegistrationState.CLOSED
        self.zk.remove_listener(self._on_session_state)
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if was in (RegistrationState.REGISTERED, RegistrationState.SUSPENDED) and self.zk.connected:
            retrying(self.zk, self._inner_delete)

    def _inner_delete(self) -> None:
        try:
            _, stat = self.zk.get(self.path)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.delete(self.path, version=stat.version)
        except NoNodeError:
            pass

    def __enter__(self) -> "BrokerRegistration":
        self.register()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def live_brokers(zk: KazooClient) -> dict[int, BrokerInfo]:
    """The registered brokers, by id; a broker that vanishes while we read is left out."""
    try:
        children = retrying(zk, zk.get_children, paths.BROKER_IDS)
    except NoNodeError:
        return {}
    brokers = {}
    for child in sorted(children, key=_id_order):
        if not child.isdigit():
            continue
        try:
            data, _ = retrying(zk, zk.get, f"{paths.BROKER_IDS}/{child}")
        except NoNodeError:
            continue
        brokers[int(child)] = parse_broker_info(int(child), data)
    return brokers


def _id_order(child: str) -> tuple[int, str]:
    return (int(child), "") if child.isdigit() else (-1, child)


def watch_brokers(zk: KazooClient, callback: Callable[[dict[int, BrokerInfo]], None]) -> Watch:
    """Call `callback(live_brokers)` now and whenever a broker joins or leaves.

    The callback runs on kazoo's event thread (the first call on the caller's thread): it must return quickly
    and must not wait for other ZooKeeper events (hand work to another thread instead). Identical consecutive
    sets are reported once.
    """
    retrying(zk, zk.ensure_path, paths.BROKER_IDS)
    handle = Watch()
    last: list[dict[int, BrokerInfo] | None] = [None]

    def on_children(_children: list[str]) -> bool | None:
        if handle.stopped:
            return False
        current = live_brokers(zk)
        if current != last[0]:  # a re-registration can show the same set twice
            last[0] = current
            callback(current)
        return None

    ChildrenWatch(zk, paths.BROKER_IDS, on_children)
    return handle

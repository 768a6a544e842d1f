"""Controller election: one broker holds the ephemeral `/controller` and is fenced by `/controller_epoch`.

    /controller        {"version":1,"brokerid":1,"timestamp":"1700000000000"}  ephemeral (the winner's session)
    /controller_epoch  "3"                                                     persistent, bumped by every win

Rule 1: winning is one ZooKeeper multi — create `/controller` and set `/controller_epoch` to epoch + 1 with a
version check against the version just read — so every win bumps the epoch exactly once and no two wins
share an epoch (Kafka's `registerControllerAndIncrementControllerEpoch`).
Rule 2: every write a controller makes is a multi that starts with `check(/controller_epoch, version of our
win)` (`commit_fenced`): once another broker has won, the deposed controller's writes fail with
`ControllerMoved` and change nothing, whatever it still believes.
Rule 3: every ZooKeeper call is retried and idempotent: a win whose reply was lost shows up as a
`/controller` owned by our own session, and is a win (the epoch is then read back, not bumped again).

`ControllerElection` state transitions (the session listener and the watch run on kazoo's thread and only
flip flags and wake the election's own thread, which makes every ZooKeeper call and every callback):

    NEW        --start()----------------------------------------> CANDIDATE
    CANDIDATE  --multi commits (or /controller is our session's)--> CONTROLLER: on_elected(epoch)
    CANDIDATE  --/controller held by another session------------> FOLLOWER: watching /controller
    FOLLOWER   --/controller deleted-----------------------------> CANDIDATE
    CONTROLLER --/controller deleted or owned by another session-> CANDIDATE: on_resigned() first
    CONTROLLER --SUSPENDED (connection lost, session may live)---> SUSPENDED: on_resigned(); stop acting
    SUSPENDED  --CONNECTED, /controller still ours----------------> CONTROLLER: on_elected(same epoch)
    any        --LOST (session expired: our node is gone)--------> CANDIDATE once reconnected (on_resigned()
                                                                   first if we were acting)
    any        --close()--------------------------------------------> CLOSED: /controller deleted if ours,
                                                                   on_resigned() if we were acting
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency
from kazoo.protocol.states import KazooState
from kazoo.retry import ForceRetryError

from sparklog.coordination import paths
from sparklog.coordination.connection import decode, encode, retrying

CONTROLLER_JSON_VERSION = 1  # Kafka's ControllerZNode
INITIAL_CONTROLLER_EPOCH = 0  # Kafka's KafkaController.InitialControllerEpoch: the first win makes it 1
ELECTION_RETRY_DELAY_S = 1.0  # after a failed attempt (ZooKeeper away) the thread tries again after this
NO_CONTROLLER = -1


class ControllerMoved(Exception):
    """Kafka error NOT_CONTROLLER: another broker has been elected since; this write changed nothing."""


class ElectionState(enum.Enum):
    NEW = "NEW"
    CANDIDATE = "CANDIDATE"
    FOLLOWER = "FOLLOWER"
    CONTROLLER = "CONTROLLER"
    SUSPENDED = "SUSPENDED"
    CLOSED = "CLOSED"


@dataclass(frozen=True)
class ElectionStatistics:
    state: ElectionState
    controller_id: int  # the last controller seen (NO_CONTROLLER when none)
    epoch: int  # our epoch while we are (or were last) controller; -1 if never
    wins: int
    last_error: str | None


def read_controller(zk: KazooClient) -> int:
    """The current controller's broker id, or NO_CONTROLLER."""
    try:
        data, _ = retrying(zk, zk.get, paths.CONTROLLER)
    except NoNodeError:
        return NO_CONTROLLER
    return int(decode(data)["brokerid"])


def read_controller_epoch(zk: KazooClient) -> tuple[int, int]:
    """(epoch, znode version) of `/controller_epoch`; (INITIAL_CONTROLLER_EPOCH, -1) before the first win."""
    try:
        data, stat = retrying(zk, zk.get, paths.CONTROLLER_EPOCH)
    except NoNodeError:
        return INITIAL_CONTROLLER_EPOCH, -1
    return int(data.decode("ascii")), stat.version


def commit_fenced(zk: KazooClient, epoch_zk_version: int, add_ops: Callable[[object], None]) -> list:
    """Commit one multi: `check(/controller_epoch, epoch_zk_version)` then the ops `add_ops(txn)` adds.

    Raises ControllerMoved if the epoch has moved on (nothing was written), else the first failing op's own
    error (BadVersionError for a partition state changed meanwhile ...). Not retried here: the caller
    re-reads and decides, since a lost reply leaves it unknown whether the multi landed.
    """
    txn = zk.transaction()
    txn.check(paths.CONTROLLER_EPOCH, epoch_zk_version)
    add_ops(txn)
    results = txn.commit()
    failed = [r for r in results if isinstance(r, Exception) and not isinstance(
        r, (RolledBackError, RuntimeInconsistency))]
    if failed and isinstance(results[0], Exception) and results[0] is failed[0]:
        raise ControllerMoved(f"/controller_epoch is no longer at version {epoch_zk_version}")
    if failed:
        raise failed[0]
    return results[1:]


class ControllerElection:
    """Competes for `/controller` for as long as it runs (module docstring); callbacks run on its thread.

    `on_elected(epoch, epoch_zk_version)` is called when this broker becomes (or, after a suspension,
    is again) controller; `on_resigned()` when it must stop acting. They must not block for long.
    """

    def __init__(self, zk: KazooClient, broker_id: int, on_elected: Callable[[int, int], None],
                 on_resigned: Callable[[], None]) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.on_elected = on_elected
        self.on_resigned = on_resigned
        self._state = ElectionState.NEW
        self._lost = False
        self._acting = False
        self.epoch = -1
        self.epoch_zk_version = -1
        self.controller_id = NO_CONTROLLER
        self._wins = 0
        self._last_error: str | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> ElectionState:
        return self._state

    @property
    def is_controller(self) -> bool:
        return self._state is ElectionState.CONTROLLER

    def statistics(self) -> ElectionStatistics:
        return ElectionStatistics(self._state, self.controller_id, self.epoch, self._wins, self._last_error)

    def start(self) -> None:
        with self._lock:
            if self._state is not ElectionState.NEW:
                raise RuntimeError(f"start() on a {self._state.value} election")
            self._state = ElectionState.CANDIDATE
        self.zk.add_listener(self._on_session_state)
        self._thread = threading.Thread(target=self._run, name=f"controller-election-{self.broker_id}",
                                        daemon=True)
        self._thread.start()
        self._wake.set()

    def close(self) -> None:
        """Resign (deleting /controller if it is ours) and stop the thread. Idempotent."""
        with self._lock:
            if self._state is ElectionState.CLOSED:
                return
            self._state = ElectionState.CLOSED
        self.zk.remove_listener(self._on_session_state)
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._resign()
        if self.zk.connected:
            try:
                retrying(self.zk, self._inner_delete)
            except Exception as exc:  # noqa: BLE001 - the session's end deletes it anyway
                self._last_error = f"{type(exc).__name__}: {exc}"

    # -- kazoo's thread: record and wake only -------------------------------------------------------------

    def _on_session_state(self, state: KazooState) -> bool | None:
        with self._lock:
            if self._state is ElectionState.CLOSED:
                return True
            if state is KazooState.SUSPENDED and self._state is ElectionState.CONTROLLER:
                self._state = ElectionState.SUSPENDED
            elif state is KazooState.LOST:
                self._lost = True
                self._state = ElectionState.CANDIDATE
            elif state is KazooState.CONNECTED and self._state is ElectionState.SUSPENDED:
                self._state = ElectionState.CANDIDATE  # the thread finds /controller still ours, or not
        self._wake.set()
        return None

    def _on_controller_event(self, _event) -> None:
        self._wake.set()

    # -- the election thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                state = self._state
            if state is ElectionState.CLOSED:
                return
            if state is ElectionState.SUSPENDED or self._lost:
                self._lost = False
                self._resign()
            if state is ElectionState.SUSPENDED or not self.zk.connected:
                continue
            try:
                retrying(self.zk, self._inner_elect)
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: try again shortly
                self._last_error = f"{type(exc).__name__}: {exc}"
                self._retry_later()

    def _retry_later(self) -> None:
        def wake() -> None:
            time.sleep(ELECTION_RETRY_DELAY_S)
            self._wake.set()

        threading.Thread(target=wake, name="controller-election-retry", daemon=True).start()

    def _inner_elect(self) -> None:
        """Idempotent: read /controller (leaving a watch), then become controller, follower, or try to win."""
        try:
            data, stat = self.zk.get(paths.CONTROLLER, watch=self._on_controller_event)
        except NoNodeError:
            if self.zk.exists(paths.CONTROLLER, watch=self._on_controller_event) is not None:
                raise ForceRetryError() from None
            self._resign()
            self._try_win()
            return
        self.controller_id = int(decode(data)["brokerid"])
        if stat.ephemeralOwner == self.zk.client_id[0]:
            epoch, version = read_controller_epoch(self.zk)
            self._elected(epoch, version)
        else:
            self._resign()
            self._set_state(ElectionState.FOLLOWER)

    def _try_win(self) -> None:
        epoch, version = self._ensure_epoch_node()
        value = {"version": CONTROLLER_JSON_VERSION, "brokerid": self.broker_id,
                 "timestamp": str(int(time.time() * 1000))}
        txn = self.zk.transaction()
        txn.create(paths.CONTROLLER, encode(value), ephemeral=True)
        txn.set_data(paths.CONTROLLER_EPOCH, str(epoch + 1).encode("ascii"), version=version)
        results = txn.commit()
        if any(isinstance(r, (NodeExistsError, BadVersionError)) for r in results):
            raise ForceRetryError()  # someone else won meanwhile: read who
        self.controller_id = self.broker_id
        self._elected(epoch + 1, version + 1)

    def _ensure_epoch_node(self) -> tuple[int, int]:
        try:
            self.zk.create(paths.CONTROLLER_EPOCH, str(INITIAL_CONTROLLER_EPOCH).encode("ascii"))
        except NodeExistsError:
            pass
        data, stat = self.zk.get(paths.CONTROLLER_EPOCH)
        return int(data.decode("ascii")), stat.version

    def _elected(self, epoch: int, epoch_zk_version: int) -> None:
        with self._lock:
            if self._state is ElectionState.CLOSED:
                return
            self._state = ElectionState.CONTROLLER
        if self._acting and (epoch, epoch_zk_version) == (self.epoch, self.epoch_zk_version):
            return
        self._resign()
        if (epoch, epoch_zk_version) != (self.epoch, self.epoch_zk_version):
            self._wins += 1
        self.epoch, self.epoch_zk_version = epoch, epoch_zk_version
        self._acting = True
        self.on_elected(epoch, epoch_zk_version)

    def _resign(self) -> None:
        if self._acting:
            self._acting = False
            self.on_resigned()

    def _set_state(self, state: ElectionState) -> None:
        with self._lock:
            if self._state is not ElectionState.CLOSED:
                self._state = state

    def _inner_delete(self) -> None:
        try:
            _, stat = self.zk.get(paths.CONTROLLER)
        except NoNodeError:
            return
        if stat.ephemeralOwner == self.zk.client_id[0]:
            try:
                self.zk.delete(paths.CONTROLLER, version=stat.version)
            except NoNodeError:
                pass

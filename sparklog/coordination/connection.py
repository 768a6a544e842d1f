"""Connecting to ZooKeeper, retrying calls, and the JSON encoding of every znode value.

Rule 1: `connect()` returns a started client or raises `ZooKeeperUnavailable`; a chroot in the connect string
is created first (with a chroot-less client), so the chrooted client never sees a missing root. While it
waits it warns every `UNREACHABLE_WARNING_INTERVAL_S` (or halfway through a shorter timeout, so that the wait
is explained before it ends) which server cannot be reached and why (kazoo's own per-attempt messages are held
back until the first connection), and its error says the same.
Rule 2: registries call ZooKeeper through `retrying(zk, fn, ...)`, which uses a *copy* of the client's
KazooRetry: one KazooRetry instance keeps its attempt counter in itself and is not safe to share between
threads, and brokers call registries from several threads.
Rule 3: `connect()` is the one place sparklog builds kazoo clients; each logs in as `security` says (by default
`ZooKeeperSecurity.from_environment()`: zookeeper_security.py) and creates every znode with the ACL that module's
Rule 2 gives its path. A login ZooKeeper refuses raises `ZooKeeperAuthenticationFailed` at once (one line), never
a wait for the timeout.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable, TypeVar

from kazoo.client import KazooClient, TransactionRequest
from kazoo.protocol.states import KeeperState
from kazoo.exceptions import KazooException, RolledBackError, RuntimeInconsistency
from kazoo.retry import KazooRetry

from sparklog.coordination.reachability import describe
from sparklog.coordination.zookeeper_security import ZooKeeperSecurity

T = TypeVar("T")

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
UNREACHABLE_WARNING_INTERVAL_S = 3.0  # while connect() waits for a server that does not answer
AUTH_POLL_S = 0.1  # how often connect() looks whether ZooKeeper refused the login while it waits
SESSION_TIMEOUT_S = 10.0  # kazoo's default; the server clamps it to [2, 20] ticks
# Reconnect forever (a broker must survive a ZooKeeper restart), backing off up to 2s.
CONNECTION_RETRY = dict(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0)
# A single command gives up after about 30s of connection loss and raises RetryFailedError.
COMMAND_RETRY = dict(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0, deadline=30.0)


class ZooKeeperUnavailable(ConnectionError):
    """No ZooKeeper server answered within the timeout."""


class ZooKeeperAuthenticationFailed(ZooKeeperUnavailable):
    """ZooKeeper refused this client's login (Rule 3)."""


def split_connect_string(zookeeper: str) -> tuple[str, str]:
    """`"h1:2181,h2:2181/sparklog"` -> `("h1:2181,h2:2181", "/sparklog")`; no chroot gives `""`.

    ValueError (one line, naming the string) for a host list kazoo would refuse with a traceback of its own
    or retry forever: an empty host, a port that is not a number in [1, 65535]. A host without a port is
    ZooKeeper's default port, as kazoo takes it."""
    hosts, slash, chroot = zookeeper.partition("/")
    if not hosts:
        raise ValueError(f"ZooKeeper connect string {zookeeper!r}: no host")
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":") if not item.strip().endswith("]") else (item, "", "")
        if not colon:
            host, port = item.strip(), "2181"
        if not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"ZooKeeper connect string {zookeeper!r}: {item!r} is not host:port "
                             "(a port in [1, 65535])")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    return hosts, chroot


def connect(
    zookeeper: str, timeout: float = CONNECT_TIMEOUT_S, session_timeout: float = SESSION_TIMEOUT_S,
    security: ZooKeeperSecurity | None = None,
) -> KazooClient:
    """A started KazooClient for `host:port[,host:port][/chroot]`; raises `ZooKeeperUnavailable`.

    `security=None` is the environment's login (Rule 3); `ZooKeeperSecurityError` if that is unusable.
    The caller owns the client and must `stop()` and `close()` it.
    """
    hosts, chroot = split_connect_string(zookeeper)
    security = security if security is not None else ZooKeeperSecurity.from_environment()
    if chroot:
        root = _start(hosts, timeout, session_timeout, security)
        try:
            root.retry(root.ensure_path, chroot)
        finally:
            close(root)
    return _start(hosts + chroot, timeout, session_timeout, security)


class _SecuredClient(KazooClient):
    """A KazooClient that logs in as `security` says and, when it sets ACLs, gives every znode it creates its
    path's ACL (zookeeper_security Rule 2), parents made by `makepath`/`ensure_path` included: sparklog never
    names an ACL itself."""

    def __init__(self, security: ZooKeeperSecurity, **kwargs: Any) -> None:
        super().__init__(**kwargs, **security.kazoo_options())
        self.security = security
        self.login_refused = False  # kazoo passes through AUTH_FAILED to CLOSED: its state cannot tell later

    def _session_callback(self, state):
        if state == KeeperState.AUTH_FAILED:
            self.login_refused = True
        return super()._session_callback(state)

    def create_async(self, path, value=b"", acl=None, *args, **kwargs):
        return super().create_async(path, value, self._acl(path, acl), *args, **kwargs)

    def ensure_path_async(self, path, acl=None):
        return super().ensure_path_async(path, None if self.security.set_acl else acl)

    def transaction(self) -> TransactionRequest:
        return _SecuredTransaction(self)

    def _acl(self, path: str, acl: Any) -> Any:
        return self.security.acls(path) if self.security.set_acl else acl


class _SecuredTransaction(TransactionRequest):
    def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False):
        super().create(path, value, self.client._acl(path, acl), ephemeral, sequence)


class _UntilConnected(logging.LoggerAdapter):
    """kazoo's logger for one client: its message per failed attempt is held back until the first
    connection (Rule 1 reports instead); errors always pass."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.connected = False

    def log(self, level, msg, *args, **kwargs) -> None:
        if self.connected or level >= logging.ERROR:
            super().log(level, msg, *args, **kwargs)

    def warn(self, msg, *args, **kwargs) -> None:  # kazoo still calls the deprecated name
        self.log(logging.WARNING, msg, *args, **kwargs)


def _start(hosts: str, timeout: float, session_timeout: float, security: ZooKeeperSecurity) -> KazooClient:
    quiet = _UntilConnected()
    client = _SecuredClient(
        security,
        hosts=hosts,
        timeout=session_timeout,
        connection_retry=dict(CONNECTION_RETRY),
        command_retry=dict(COMMAND_RETRY),
        logger=quiet,
    )
    connected = client.start_async()
    deadline = time.monotonic() + timeout
    interval = min(UNREACHABLE_WARNING_INTERVAL_S, timeout / 2)
    next_warning = time.monotonic() + interval
    while not connected.wait(min(AUTH_POLL_S, max(0.0, deadline - time.monotonic()))):
        now = time.monotonic()
        if now >= deadline or client.login_refused:
            break
        if now >= next_warning:
            logger.warning("cannot reach ZooKeeper at %s; retrying", describe(hosts))
            next_warning = now + interval
    if client.connected and security.authenticated:
        _await_login(client)
    if client.login_refused:
        close(client)
        raise ZooKeeperAuthenticationFailed(f"ZooKeeper at {hosts} refused the login of {security.describe()} "
                                            "(wrong password, unknown user, or a server without SASL?)")
    if not client.connected:
        reason = describe(hosts)
        close(client)
        raise ZooKeeperUnavailable(f"could not reach ZooKeeper within {timeout:g}s: {reason} "
                                   "(is it running? `sparklog zookeeper start` runs one)")
    quiet.connected = True
    return client


def _await_login(client: KazooClient) -> None:
    """kazoo reports CONNECTED before its SASL exchange: a first request, queued behind that exchange, answers
    only once the login is done (Rule 3); a refused login sets `login_refused`."""
    try:
        client.exists("/")
    except KazooException:
        pass  # the caller reads the state


def close(client: KazooClient, timeout: float | None = None) -> None:
    """Stop and close a client; safe to call twice. With `timeout`, return after at most that many seconds:
    kazoo's stop() waits up to a session timeout (10 s at least) for its connection thread while ZooKeeper is
    unreachable, and a process on its way out need not wait for that (the server expires the session)."""
    if timeout is None:
        _stop_and_close(client)
        return
    closing = threading.Thread(target=_stop_and_close, args=(client,), name="zookeeper-close", daemon=True)
    closing.start()
    closing.join(timeout)
    if closing.is_alive():
        logger.warning("ZooKeeper session not closed within %.0f s (ZooKeeper unreachable?): leaving it to expire",
                    timeout)


def _stop_and_close(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


def retrying(zk: KazooClient, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`zk.retry(fn, ...)` through a private copy of the client's retry policy (thread-safe)."""
    policy = zk.retry if isinstance(zk.retry, KazooRetry) else KazooRetry(**COMMAND_RETRY)
    return policy.copy()(fn, *args, **kwargs)


def encode(value: Any) -> bytes:
    """Compact JSON, as Kafka writes its znodes."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8")


def decode(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))


def commit(transaction: Any) -> list:
    """Commit a kazoo transaction; raise the operation's own error (NodeExistsError ...) if it failed.

    kazoo reports a failed multi as a list holding one real exception and RolledBackError /
    RuntimeInconsistency for the other operations.
    """
    return check_results(transaction.commit())


def check_results(results: list) -> list:
    """The results of a committed kazoo transaction (sync or `commit_async().get()`), or its first real error."""
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, (RolledBackError, RuntimeInconsistency)):
            raise result
    return results

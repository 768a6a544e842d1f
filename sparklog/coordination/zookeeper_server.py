"""A real ZooKeeper server in a child JVM, from the jars inside the pyspark wheel: standalone
(`ZooKeeperServerMain`), or a member of a replicated ensemble (`QuorumPeerMain`: `server.N` lines, `myid`,
quorum and election ports), as the paper's ZooKeeper is a replicated service.

Rule 1: every JVM this module starts is stopped by `stop()`, by the context manager, or, as a fallback, at
interpreter exit; on Linux a JVM started from the main thread also dies with its parent (PR_SET_DEATHSIG).
Rule 2: `start()` returns only once the server answers the `srvr` four-letter word, or raises
`ZooKeeperStartError` carrying the tail of the JVM's log.

Rule 3 (ensemble): a member serves only while a majority of the ensemble is up, so `ZooKeeperEnsemble.start()`
launches every member before it waits for any; a member killed and started again (a new EmbeddedZooKeeper on the
same data directory, id and ports) rejoins as a follower and catches up from the leader.

Rule 4 (SASL): `sasl_users={"kafka": "pw"}` serves SASL DIGEST-MD5 logins (a JAAS `Server` section of
DigestLoginModule `user_<name>="<password>"` entries, `authProvider.sasl=SASLAuthenticationProvider`), so that
znodes created with CREATOR_ALL belong to `sasl:<name>`; `require_sasl=True` also refuses every request of a
client that has not logged in (`enforce.auth.enabled`, ZooKeeper 3.7+).

Rule 5 (TLS): `tls=ServerTls(keystore, truststore)` also serves a TLS client port (`secure_port`,
`secure_connect_string`: Netty, PEM stores, client certificates required and made logins by the
X509AuthenticationProvider, so a znode created with CREATOR_ALL belongs to `x509:<subject>`). The plaintext
client port stays (the four-letter words of Rule 2 use it); with `require_sasl` nothing is served there anonymously.

Lifecycle: NEW --start()--> RUNNING --stop()--> STOPPED (stop() is idempotent; a STOPPED server is not
restarted, make a new one). The data directory is a temporary one removed by stop() unless one is given.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

# tickTime is ZooKeeper's time unit; sessions may last 2..20 ticks. A short tick (ZooKeeper's default is 2000)
# lets tests expire sessions within a second or two.
TICK_TIME_MS = 500
MIN_SESSION_TIMEOUT_MS = 1000  # 2 ticks
MAX_SESSION_TIMEOUT_MS = 60000
JVM_MAX_HEAP = "-Xmx256m"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# How many times start() picks another free port when the one it chose was taken in between (port=0 only).
PORT_ATTEMPTS = 3
LOG_TAIL_CHARS = 4000
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# Ticks a follower may take to connect and sync to the leader, and to stay in sync (ZooKeeper's own examples)
INIT_LIMIT_TICKS = 10
SYNC_LIMIT_TICKS = 5
_PR_SET_DEATHSIG = 1
SASL_AUTH_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"

_LIVE: "weakref.WeakSet[EmbeddedZooKeeper]" = weakref.WeakSet()


class JavaNotFound(RuntimeError):
    """`java` is not on PATH (nor under $JAVA_HOME/bin)."""

    def __init__(self) -> None:
        super().__init__(
            "java was not found on PATH or in $JAVA_HOME/bin; the embedded ZooKeeper needs a Java 17+ runtime. "
            "Install one (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`; macOS: `brew install openjdk@17`) "
            "or set JAVA_HOME."
        )


class ZooKeeperStartError(RuntimeError):
    """The JVM exited or did not answer within the timeout; the message carries the tail of its output."""


def find_java() -> str:
    """Return the path of `java`: $JAVA_HOME/bin/java first, then PATH; raise `JavaNotFound`."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home, "bin", "java")
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise JavaNotFound()
    return found


def pyspark_jars_dir() -> Path:
    """The `jars/` directory of the installed pyspark wheel, which ships zookeeper-3.9.x and its dependencies."""
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not any(jars.glob("zookeeper-[0-9]*.jar")):
        raise ZooKeeperStartError(f"no zookeeper jar in {jars}; is pyspark installed completely?")
    return jars


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the caller must cope with losing the race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a four-letter word (`ruok`, `srvr`, `mntr` ...) and return the whole answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


@dataclass(frozen=True)
class QuorumPeer:
    """One ensemble member's addresses: `server.N=host:quorum_port:election_port` and its client port."""

    host: str
    client_port: int
    quorum_port: int
    election_port: int

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.client_port}"


def parse_servers(text: str) -> dict[int, QuorumPeer]:
    """`1=host:2888:3888:2181,2=...` (ZooKeeper's server.N value, then the client port) -> {id: QuorumPeer};
    ValueError naming the bad entry."""
    peers = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        sid, _, address = item.partition("=")
        fields = address.rsplit(":", 3)
        if not sid.isdigit() or len(fields) != 4 or not all(f.isdigit() for f in fields[1:]) or not fields[0]:
            raise ValueError(f"server {item!r} is not ID=HOST:QUORUM_PORT:ELECTION_PORT:CLIENT_PORT")
        peers[int(sid)] = QuorumPeer(fields[0], int(fields[3]), int(fields[1]), int(fields[2]))
    if len(peers) < 3 or len(peers) % 2 == 0:
        raise ValueError(f"an ensemble has an odd number of servers, at least 3, not {len(peers)}")
    return peers


def _quorum_lines(peers: Mapping[int, QuorumPeer] | None) -> list[str]:
    if not peers:
        return []
    return [f"initLimit={INIT_LIMIT_TICKS}", f"syncLimit={SYNC_LIMIT_TICKS}"] + [
        f"server.{sid}={peer.host}:{peer.quorum_port}:{peer.election_port}" for sid, peer in sorted(peers.items())]


def _zoo_cfg(data_dir: Path, host: str, port: int, peers: Mapping[int, QuorumPeer] | None = None) -> str:
    return "\n".join(
        [
            *_quorum_lines(peers),
            f"tickTime={TICK_TIME_MS}",
            f"dataDir={data_dir}",
            f"clientPort={port}",
            f"clientPortAddress={host}",
            f"minSessionTimeout={MIN_SESSION_TIMEOUT_MS}",
            f"maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}",
            "maxClientCnxns=0",  # unlimited: a test session opens many clients from 127.0.0.1
            "admin.enableServer=false",  # the Jetty admin server would take port 8080
            "4lw.commands.whitelist=*",
            "",
        ]
    )


X509_AUTH_PROVIDER = "org.apache.zookeeper.server.auth.X509AuthenticationProvider"
NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"


@dataclass(frozen=True)
class ServerTls:
    """Rule 5's stores: `keystore` is one PEM file of the server's key and certificate chain, `truststore` the
    PEM CA certificates a client certificate must be signed by."""

    keystore: str
    truststore: str


def _tls_cfg_lines(tls: ServerTls | None, host: str, secure_port: int) -> list[str]:
    if tls is None:
        return []
    return [f"secureClientPort={secure_port}", f"secureClientPortAddress={host}",
            f"serverCnxnFactory={NETTY_FACTORY}", f"ssl.keyStore.location={tls.keystore}", "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={tls.truststore}", "ssl.trustStore.type=PEM", "ssl.clientAuth=need",
            f"authProvider.x509={X509_AUTH_PROVIDER}"]


def sasl_users_of_jaas(path: str | os.PathLike) -> dict[str, str]:
    """The `user_<name>="<password>"` entries of a JAAS file's `Server` section (Rule 4); ValueError (one line)
    for a file that cannot be read or parsed, or whose Server section is not one DigestLoginModule with users."""
    from sparklog.protocol.jaas import JaasError, parse_jaas_file

    try:
        entries = parse_jaas_file(Path(path).read_text()).get("Server", [])
    except (OSError, JaasError) as exc:
        raise ValueError(f"JAAS file {path}: {exc}") from None
    users = {k[len("user_"):]: v for e in entries for k, v in e.options.items() if k.startswith("user_")}
    if len(entries) != 1 or entries[0].login_module != DIGEST_LOGIN_MODULE or not users:
        raise ValueError(f"JAAS file {path}: its Server section must be one {DIGEST_LOGIN_MODULE} with "
                         'user_<name>="<password>" entries')
    return users


def _sasl_cfg_lines(sasl_users: Mapping[str, str] | None, require_sasl: bool) -> list[str]:
    """zoo.cfg lines of Rule 4."""
    if not sasl_users:
        return []
    lines = [f"authProvider.sasl={SASL_AUTH_PROVIDER}"]
    return lines + (["enforce.auth.enabled=true", "enforce.auth.schemes=sasl"] if require_sasl else [])


def _server_jaas(sasl_users: Mapping[str, str]) -> str:
    """The JAAS `Server` section of Rule 4, values quoted with JAAS's escapes."""
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    users = "\n".join(f"    user_{name}={quoted(password)}" for name, password in sasl_users.items())
    return f"Server {{\n  {DIGEST_LOGIN_MODULE} required\n{users};\n}};\n"


def _log4j2_properties(log_file: Path) -> str:
    # The pyspark wheel routes slf4j to log4j2; everything goes to a file so that stdout stays quiet.
    return "\n".join(
        [
            "status = error",
            "appender.file.type = File",
            "appender.file.name = FILE",
            f"appender.file.fileName = {log_file}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n",
            "rootLogger.level = INFO",
            "rootLogger.appenderRef.file.ref = FILE",
            "",
        ]
    )


def die_with_parent() -> None:  # runs in the child between fork and exec
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class EmbeddedZooKeeper:
    """A standalone ZooKeeper server (`ZooKeeperServerMain`) in a child JVM.

    Example::

        with EmbeddedZooKeeper() as server:
            client = connect(server.connect_string)

    `port=0` picks a free port. `data_dir=None` uses a temporary directory that `stop()` removes; a given
    directory is kept (and reused by the next server started on it). The server's log is
    `<data_dir>/zookeeper.log`; the JVM's own stdout/stderr go to `<data_dir>/jvm.out`.
    """

    def __init__(self, port: int = 0, data_dir: str | os.PathLike | None = None, host: str = "127.0.0.1",
                 server_id: int | None = None, peers: Mapping[int, QuorumPeer] | None = None,
                 sasl_users: Mapping[str, str] | None = None, require_sasl: bool = False,
                 tls: ServerTls | None = None) -> None:
        self.tls = tls
        self.secure_port = 0  # chosen by start() with tls
        if require_sasl and not sasl_users:
            raise ValueError("require_sasl needs sasl_users: no client could log in")
        self.sasl_users = dict(sasl_users) if sasl_users else None
        self.require_sasl = require_sasl
        if (server_id is None) != (peers is None) or (peers is not None and server_id not in peers):
            raise ValueError("an ensemble member needs its server id among the ensemble's peers")
        self.server_id = server_id
        self.peers = dict(peers) if peers is not None else None
        self.host = host
        self._requested_port = port
        self.port = port
        self._owns_data_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def connect_string(self) -> str:
        """`host:port`, as kazoo and `sparklog --zookeeper` take it."""
        return f"{self.host}:{self.port}"

    @property
    def secure_connect_string(self) -> str:
        """`host:secure_port` of Rule 5's TLS client port."""
        if self.tls is None:
            raise RuntimeError("this ZooKeeper serves no TLS port (tls=None)")
        return f"{self.host}:{self.secure_port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def log_file(self) -> Path:
        return self._require_data_dir() / "zookeeper.log"

    def start(self, timeout: float = START_TIMEOUT_S, wait: bool = True) -> "EmbeddedZooKeeper":
        """Start the JVM and wait until it serves requests; return self. `wait=False` returns once the JVM is
        launched (an ensemble member, which serves only once a majority runs: Rule 3); `wait_until_serving`
        waits then."""
        with self._lock:
            if self._stopped or self._process is not None:
                raise RuntimeError("an EmbeddedZooKeeper is started once; make a new one")
            java = find_java()
            jars = pyspark_jars_dir()
            if self.data_dir is None:
                self.data_dir = Path(tempfile.mkdtemp(prefix="sparklog-zk-"))
            self.data_dir.mkdir(parents=True, exist_ok=True)
            _LIVE.add(self)
            try:
                if self.peers is not None:
                    self._spawn(java, jars)
                    if wait:
                        self.wait_until_serving(timeout)
                else:
                    self._launch_on_some_port(java, jars, timeout)
            except BaseException:
                self._release()
                raise
        return self

    def _launch_on_some_port(self, java: str, jars: Path, timeout: float) -> None:
        attempts = PORT_ATTEMPTS if self._requested_port == 0 else 1
        for attempt in range(attempts):
            self.port = self._requested_port or free_port(self.host)
            self.secure_port = 0  # Rule 5's port is chosen afresh with each attempt
            try:
                return self._launch(java, jars, timeout)
            except ZooKeeperStartError:
                self._terminate()
                if attempt + 1 == attempts or "Address already in use" not in self._log_tail():
                    raise

    def _launch(self, java: str, jars: Path, timeout: float) -> None:
        self._spawn(java, jars)
        self.wait_until_serving(timeout)

    def _spawn(self, java: str, jars: Path) -> None:
        data_dir = self._require_data_dir()
        cfg = data_dir / "zoo.cfg"
        if self.tls is not None and not self.secure_port:
            self.secure_port = free_port(self.host)
        cfg.write_text(_zoo_cfg(data_dir / "data", self.host, self.port, self.peers)
                       + "\n".join(_sasl_cfg_lines(self.sasl_users, self.require_sasl)
                                   + _tls_cfg_lines(self.tls, self.host, self.secure_port) + [""]))
        if self.server_id is not None:
            (data_dir / "data").mkdir(parents=True, exist_ok=True)
            (data_dir / "data" / "myid").write_text(f"{self.server_id}\n")
        log4j = data_dir / "log4j2.properties"
        log4j.write_text(_log4j2_properties(data_dir / "zookeeper.log"))
        command = [
            java,
            JVM_MAX_HEAP,
            "-XX:+UseSerialGC",  # two cores are shared by everything; no parallel GC threads
            f"-Dlog4j2.configurationFile={log4j}",
            "-Dzookeeper.jmx.log4j.disable=true",
            *self._jaas_options(data_dir),
            "-cp",
            str(jars / "*"),
            MAIN_CLASS if self.peers is None else QUORUM_MAIN_CLASS,
            str(cfg),
        ]
        on_main_thread = threading.current_thread() is threading.main_thread()
        with open(data_dir / "jvm.out", "wb") as out:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=data_dir,
                # PR_SET_DEATHSIG fires when the *thread* that forked exits, so only from the main thread.
                preexec_fn=die_with_parent if sys.platform == "linux" and on_main_thread else None,
            )

    def _jaas_options(self, data_dir: Path) -> list[str]:
        if not self.sasl_users:
            return []
        jaas = data_dir / "zookeeper_jaas.conf"
        jaas.write_text(_server_jaas(self.sasl_users))
        jaas.chmod(0o600)
        return [f"-Djava.security.auth.login.config={jaas}"]

    def wait_until_serving(self, timeout: float = START_TIMEOUT_S) -> None:
        """Rule 2: return once the server answers `srvr` as serving, else raise ZooKeeperStartError."""
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper JVM exited with code {self._process.returncode} during start-up:\n{self._log_tail()}"
                )
            try:
                if "Zookeeper version" in four_letter_word(self.host, self.port, "srvr", timeout=1.0):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise ZooKeeperStartError(
                    f"ZooKeeper at {self.connect_string} did not answer within {timeout:.0f}s:\n{self._log_tail()}"
                )
            time.sleep(0.1)

    def mode(self) -> str | None:
        """`leader`, `follower` or `standalone` as the server says (`srvr`), or None if it does not serve."""
        try:
            answer = four_letter_word(self.host, self.port, "srvr", timeout=1.0)
        except OSError:
            return None
        return next((line.split(":", 1)[1].strip() for line in answer.splitlines() if line.startswith("Mode:")),
                    None)

    def kill(self) -> None:
        """SIGKILL the JVM and reap it (a fault, not a stop: the data directory stays)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Terminate the JVM (SIGTERM, then SIGKILL after `timeout`), reap it, remove a temporary data dir."""
        with self._lock:
            self._release(timeout)

    def _release(self, timeout: float = STOP_TIMEOUT_S) -> None:
        self._stopped = True
        self._terminate(timeout)
        _LIVE.discard(self)
        if self._owns_data_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _terminate(self, timeout: float = STOP_TIMEOUT_S) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _require_data_dir(self) -> Path:
        if self.data_dir is None:
            raise RuntimeError("the data directory is chosen by start()")
        return self.data_dir

    def _log_tail(self) -> str:
        parts = []
        for name in ("jvm.out", "zookeeper.log"):
            try:
                text = (self._require_data_dir() / name).read_text(errors="replace")
            except OSError:
                continue
            if text.strip():
                parts.append(f"--- {name} (tail) ---\n{text[-LOG_TAIL_CHARS:]}")
        return "\n".join(parts) or "(the JVM wrote nothing)"

    def __enter__(self) -> "EmbeddedZooKeeper":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else ("stopped" if self._stopped else "new")
        return f"EmbeddedZooKeeper({self.connect_string}, {state}, data_dir={self.data_dir})"


class ZooKeeperEnsemble:
    """`size` quorum members on one host (Rule 3), each with its own data directory under `base_dir`.

        with ZooKeeperEnsemble(3, tmp_path) as ensemble:
            brokers use ensemble.connect_string ("h:p1,h:p2,h:p3")
            ensemble.kill(ensemble.leader()); ensemble.restart(that id)
    """

    def __init__(self, size: int = 3, base_dir: str | os.PathLike | None = None, host: str = "127.0.0.1") -> None:
        if size < 3 or size % 2 == 0:
            raise ValueError(f"an ensemble has an odd number of servers, at least 3, not {size}")
        self.host = host
        self.base_dir = Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="sparklog-zk-"))
        self._owns_base_dir = base_dir is None
        self.peers = {sid: QuorumPeer(host, free_port(host), free_port(host), free_port(host))
                      for sid in range(1, size + 1)}
        self.members: dict[int, EmbeddedZooKeeper] = {}

    @property
    def connect_string(self) -> str:
        return ",".join(peer.connect_string for _, peer in sorted(self.peers.items()))

    def start(self, timeout: float = START_TIMEOUT_S) -> "ZooKeeperEnsemble":
        try:
            for sid in self.peers:
                self.members[sid] = self._member(sid).start(timeout, wait=False)
            for member in self.members.values():
                member.wait_until_serving(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _member(self, sid: int) -> EmbeddedZooKeeper:
        return EmbeddedZooKeeper(self.peers[sid].client_port, self.base_dir / f"zk-{sid}", self.host, sid, self.peers)

    def leader(self) -> int | None:
        return next((sid for sid, m in self.members.items() if m.running and m.mode() == "leader"), None)

    def kill(self, sid: int) -> None:
        self.members[sid].kill()

    def restart(self, sid: int, timeout: float = START_TIMEOUT_S) -> None:
        """Start member `sid` again on its data directory (after `kill`); it rejoins the quorum."""
        self.members[sid].stop()
        self.members[sid] = self._member(sid).start(timeout)

    def stop(self) -> None:
        for member in self.members.values():
            member.stop()
        if self._owns_base_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> "ZooKeeperEnsemble":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop()

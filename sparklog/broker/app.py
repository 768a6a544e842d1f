"""The broker process: wires config, storage, ZooKeeper, partitions, handlers and the server together.

Startup order (Kafka's): lock the log dirs (storage/dir_lock.py: a broker already running on them ends
this one with one line, before any log opens) -> connect to ZooKeeper and read the cluster id -> open the
log manager (recovery runs here) -> bind the listeners (a port in use: one line) -> register `/brokers/ids/<id>` (waiting out the ephemeral node of a
killed predecessor with the same id) -> watch the registries and open the partitions this broker leads ->
stand for controller (`broker/controller.py`) -> listen -> print the ready line -> serve. The listeners are
bound early (the registration advertises the port) but listen only once requests can be answered: until
then a connection is refused, never accepted and left unanswered (a restarted broker may wait a whole
ZooKeeper session timeout to register).
Shutdown (SIGTERM, SIGINT, or `Broker.stop()`) first, while still serving, asks the controller to move this
broker's leaderships and ISR memberships away and waits for that, bounded by `controlled.shutdown.timeout.ms`
(controlled shutdown, with `controlled.shutdown.enable`), so that producers retrying on
NOT_LEADER_OR_FOLLOWER see no error; then it runs startup backwards: stop serving (listeners, then
connections, then tasks), resign as controller, deregister, stop the watches, flush and close the logs,
close ZooKeeper, release the log dirs' lock. Every one of those background services is joined, as it starts,
to one owner (`services.ServiceGroup`, trio's nursery as the model), which closes them in that order, names a
thread left running, and reports an exception escaping any of their threads.

The (api, version) pairs served per client (`Dispatcher.statistics().versions_by_client`) are written to
the log as one `API_MATRIX_MARKER <json>` line on SIGUSR1 and at shutdown, for tests and operators; so is
the server's `statistics()` (connections, queued request bytes, `handler_errors` ...) as one
`STATISTICS_MARKER <json>` line, which is how the hostile-input tests see handler exceptions that the
server caught (`BrokerProcess.statistics()` in launcher.py sends the signal and parses the line).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass

from sparklog.broker.authorization import Authorization
from sparklog.broker.security.inter_broker import inter_broker_connector
from sparklog.broker.config import TLS_PROTOCOLS, BrokerConfig
from sparklog.broker.tls import peer_principal
from sparklog.broker.replication.controller import Controller, controlled_shutdown
from sparklog.broker.network.dispatch import Dispatcher
from sparklog.broker.handlers import BrokerState
from sparklog.broker.replication.cleaner_reporter import CleanerReporter
from sparklog.broker.replication.log_faults import LogFaultReporter
from sparklog.broker.replication.partitions import PartitionManager
from sparklog.broker.replication.purgatory import Purgatory
from sparklog.broker.replication.replica_manager import ReplicaManager
from sparklog.broker.network.inter_broker import InterBrokerListener
from sparklog.broker.network.server import BrokerServer, TlsListener
from sparklog.broker.malloc import keep_freed_memory
from sparklog.broker.metrics import BrokerCollector, MetricsEndpoint, MetricsListenerUnavailable
from sparklog.broker.services import ServiceGroup, ServiceGroupStatistics
from sparklog.coordination import brokers as broker_registry
from sparklog.coordination.acl_store import AclCache
from sparklog.coordination import cluster as cluster_registry
from sparklog.coordination import connection as zk_connection
from sparklog.coordination.zookeeper_security import create_persistent_paths
from sparklog.coordination.client_quotas import QuotaConfigWatch
from sparklog.coordination.broker_configs import BrokerConfigWatch
from sparklog.broker.dynamic_config import DynamicBrokerConfig
from sparklog.broker.quota.manager import QuotaWindows
from sparklog.broker.quota.replication import BROKER_SCOPE, DEFAULT_SCOPE, ReplicationThrottles
from sparklog.storage.dir_lock import LogDirInUse, lock_log_dirs

log = logging.getLogger(__name__)

# Threads that run blocking ZooKeeper calls for handlers (CreateTopics, OffsetCommit, InitProducerId ...).
ZOOKEEPER_WORKERS = 4
# A restarted broker waits this much longer than the session timeout for its predecessor's node to expire.
REGISTRATION_GRACE_S = 5.0
# a shutdown waits this long for the ZooKeeper session's close (its ephemeral nodes go at once); while
# ZooKeeper is unreachable kazoo would wait a session timeout, past the launcher's stop timeout (issue 26)
ZOOKEEPER_CLOSE_TIMEOUT_S = 3.0
# Prefix of the log line holding the versions served per client (tests/support/cluster.py parses it).
API_MATRIX_MARKER = "api versions served:"
# Prefix of the log line holding the server's statistics (launcher.BrokerProcess.statistics parses it).
STATISTICS_MARKER = "broker statistics:"
# Logged with the time it took once a controlled shutdown has moved this broker's leaderships away.
CONTROLLED_SHUTDOWN_MARKER = "controlled shutdown: leadership moved in"
# Logged once per listener as it is bound (launcher.BrokerProcess.listeners parses it): name, address, protocol.
LISTENER_MARKER = "listener"


@dataclass(frozen=True)
class BrokerStatistics:
    broker_id: int
    server: object
    partitions: object
    registration: object
    dispatcher: object
    controller: object
    replicas: object = None  # ReplicaManagerStatistics
    offsets: object = None  # OffsetStoreStatistics (__consumer_offsets)
    services: ServiceGroupStatistics | None = None  # the background services and their threads (services.py)


class ListenerUnavailable(RuntimeError):
    """A listener's address cannot be bound (a port in use, an address not on this host)."""


class Broker:
    """One broker. `run()` blocks until stopped; everything it opened is closed when it returns."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.zk = None
        self.logs = None
        self.dir_locks = None
        self.cleaner_reporter: CleanerReporter | None = None
        self.registration = None
        self.controller: Controller | None = None
        self._stopping = False
        self.partitions: PartitionManager | None = None
        self.server: BrokerServer | None = None
        self.dispatcher: Dispatcher | None = None
        self.replicas: ReplicaManager | None = None
        self.executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.address: tuple[str, int] | None = None  # the first listener's bound address
        self.advertised: tuple[str, int] | None = None  # ... and what clients are told of it
        self.endpoints: dict[str, tuple[str, int, str]] = {}  # every listener: advertised host, port, protocol
        self.services: ServiceGroup | None = None  # the owner of every background service (services.py)
        self.metrics: MetricsEndpoint | None = None  # the Prometheus endpoint (metrics.py), if metrics.listener

    @property
    def stopping(self) -> bool:
        """Shutdown has begun (a signal or `stop()`)."""
        return self._stopping

    def statistics(self) -> BrokerStatistics:
        return BrokerStatistics(
            self.config.broker_id,
            self.server.statistics() if self.server else None,
            self.partitions.statistics() if self.partitions else None,
            self.registration.statistics() if self.registration else None,
            self.dispatcher.statistics() if self.dispatcher else None,
            self.controller.statistics() if self.controller else None,
            self.replicas.statistics() if self.replicas else None,
            self.dispatcher.state.offsets.statistics() if self.dispatcher else None,
            self.services.statistics() if self.services else None,
        )

    def run(self) -> None:
        asyncio.run(self.serve())

    async def serve(self) -> None:
        """Start, serve until `stop()` or a signal, shut down; always releases what it opened."""
        self.loop = asyncio.get_running_loop()
        self.services = ServiceGroup(on_error=self._background_error)
        lag_sampler = None
        try:
            self._start_metrics()
            await self.loop.run_in_executor(None, self._open_storage_and_zookeeper)
            self._build_server()
            await self.loop.run_in_executor(None, self._register_and_watch)
            lag_sampler = self.loop.create_task(self.dispatcher.meters.sample_loop_lag())
            self._install_signal_handlers()
            self.server.listen()
            host, port = self.advertised
            print(f"sparklog broker {self.config.broker_id} ready on {host}:{port}", flush=True)
            await self.server.serve()
        finally:
            if lag_sampler is not None:
                lag_sampler.cancel()
            if self.dispatcher is not None:  # on the loop: waiting joins and syncs answered, timers cancelled
                self.dispatcher.state.groups.close()
                await self.dispatcher.state.offsets.close()
                await self.dispatcher.state.transactions.close()
            if self.replicas is not None:
                await self.replicas.close()  # the fetchers, before the logs they append to close
            await self.loop.run_in_executor(None, self._close)

    def stop(self) -> None:
        """Thread-safe: ask the broker to shut down (after a controlled shutdown when enabled)."""
        if self.loop is not None and self.server is not None:
            self.loop.call_soon_threadsafe(self._begin_shutdown)

    def _begin_shutdown(self, why: str = "stop()") -> None:
        """On the loop: hand leadership away while still serving, then stop serving. Idempotent."""
        log.info("received %s: shutting down", why)  # at once: what follows may wait for ZooKeeper
        if self._stopping:
            return
        self._stopping = True
        if not self.config.controlled_shutdown_enable or self.controller is None:
            self.server.stop()
            return
        self.loop.create_task(self._controlled_shutdown())

    async def _controlled_shutdown(self) -> None:
        cfg = self.config
        started = time.monotonic()
        try:
            if self.replicas is not None:
                await self.replicas.stop_following()  # leaders must not take this broker back into their ISR
            moved = await asyncio.wait_for(self.loop.run_in_executor(  # a stopped ZooKeeper answers nothing
                self.executor, controlled_shutdown, self.zk, cfg.broker_id, cfg.controlled_shutdown_timeout_ms / 1000.0),
                cfg.controlled_shutdown_timeout_ms / 1000.0)
            if moved:
                log.info("%s %.0f ms", CONTROLLED_SHUTDOWN_MARKER, (time.monotonic() - started) * 1000.0)
            else:
                log.warning("controlled shutdown did not complete (ZooKeeper unreachable, or leadership did not "
                            "move within %d ms); stopping anyway", cfg.controlled_shutdown_timeout_ms)
        except TimeoutError:
            log.warning("controlled shutdown did not complete within %d ms (ZooKeeper unanswering); stopping "
                        "anyway", cfg.controlled_shutdown_timeout_ms)
            # what still waits for ZooKeeper (this request, the closing steps) fails now; stop() itself may
            # wait a session timeout for its connection thread, so it must not hold the loop
            threading.Thread(target=self.zk.stop, name="zookeeper-stop", daemon=True).start()
        except Exception:  # noqa: BLE001 - ZooKeeper away: stop anyway, the controller sees us go
            log.exception("controlled shutdown failed; stopping anyway")
        finally:
            self.server.stop()

    # -- startup ------------------------------------------------------------------------------------------

    def _start_metrics(self) -> None:
        """The Prometheus endpoint (metrics.py Rule 4), before anything else: a scrape during startup answers."""
        endpoint = self.config.metrics_listener
        if endpoint is not None:
            self.metrics = self.services.start("metrics endpoint", MetricsEndpoint(
                endpoint.host, endpoint.port, BrokerCollector(self)).start, lambda: self.metrics.close())
            log.info("metrics endpoint on http://%s:%d/metrics", self.metrics.host, self.metrics.port)

    def _open_storage_and_zookeeper(self) -> None:
        from sparklog.storage import LogConfig, LogManager

        cfg, services = self.config, self.services
        self.dir_locks = lock_log_dirs(cfg.log_dirs)
        services.add("log dir locks", self.dir_locks.release)
        security = cfg.zookeeper_security
        self.zk = services.start("zookeeper", lambda: zk_connection.connect(
            cfg.zookeeper_connect, timeout=cfg.zookeeper_connection_timeout_ms / 1000.0,
            session_timeout=cfg.zookeeper_session_timeout_ms / 1000.0, security=security),
            lambda: zk_connection.close(self.zk, timeout=ZOOKEEPER_CLOSE_TIMEOUT_S))
        if security.set_acl:
            create_persistent_paths(self.zk)
        self.cluster_id = cluster_registry.get_or_create_cluster_id(self.zk)
        faults = LogFaultReporter(self.zk, cfg.broker_id)  # for `sparklog topics describe`
        self.logs = services.start("logs", lambda: LogManager(
            list(cfg.log_dirs), LogConfig.from_dict(self._storage_defaults()),
            retention_check_interval_ms=cfg.log_retention_check_interval_ms, scrubber=cfg.scrubber,
            on_fence=faults.on_fence, cleaner=cfg.cleaner), lambda: self.logs.close())
        if len(cfg.log_dirs) > 1:
            # get_or_create looks in the emptiest dir only; find existing logs in the others first
            self.logs.load_existing()
        reporter = CleanerReporter(self.zk, cfg.broker_id, self.logs)
        self.cleaner_reporter = services.start("cleaner reporter", reporter.start, reporter.close)
        # Blocking calls while serving (ZooKeeper for the handlers, the replica manager and the fault reporter;
        # offsets reads; a controlled shutdown) run here.
        self.executor = services.start("executor", lambda: concurrent.futures.ThreadPoolExecutor(
            ZOOKEEPER_WORKERS, thread_name_prefix="broker-zk"),
            lambda: self.executor.shutdown(wait=True, cancel_futures=True))
        faults.start(self.executor)

    def _storage_defaults(self) -> dict[str, str]:
        from sparklog.storage.config import KEYS

        unknown = set(self.config.log_defaults) - set(KEYS)
        for key in sorted(unknown):
            log.warning("log setting %s is not supported by the storage; ignored", key)
        return {k: v for k, v in self.config.log_defaults.items() if k in KEYS}

    def _build_server(self) -> None:
        cfg = self.config
        self.server = BrokerServer(
            None,
            max_connections=cfg.max_connections,
            max_connections_per_ip=cfg.max_connections_per_ip,
            max_queued_bytes=cfg.queued_max_request_bytes,
            idle_timeout_s=cfg.connections_max_idle_ms / 1000.0 if cfg.connections_max_idle_ms > 0 else None,
            send_buffer_bytes=cfg.socket_send_buffer_bytes,
            receive_buffer_bytes=cfg.socket_receive_buffer_bytes,
            max_in_flight=cfg.queued_max_requests,
        )
        self.endpoints = {}
        for listener in cfg.listeners:
            bound = self._bind(listener)
            advertised = next((e for e in cfg.advertised if e.name == listener.name), listener)
            self.endpoints[listener.name] = (advertised.host, advertised.port or bound[1], cfg.protocol(listener.name))
            log.info("%s %s on %s:%d (%s), advertised as %s:%d", LISTENER_MARKER, listener.name, *bound,
                     cfg.protocol(listener.name), *self.endpoints[listener.name][:2])
            if self.address is None:
                self.address = bound
                self.advertised = self.endpoints[listener.name][:2]

    def _bind(self, listener) -> tuple[str, int]:
        """Bind one listener, served over TLS when its security protocol says so (never less: broker/tls.py)."""
        cfg = self.config
        tls = None
        if cfg.protocol(listener.name) in TLS_PROTOCOLS:
            settings = cfg.listener_tls[listener.name]  # its own listener.name.<l>.ssl.* (broker/tls.py Rule 6)
            mapper = settings.mapping
            tls = TlsListener(cfg.ssl_server_contexts[listener.name], settings.handshake_timeout_s,
                              lambda ssl_object: peer_principal(ssl_object, mapper))
        try:
            return self.server.bind(listener.host or "0.0.0.0", listener.port, listener.name, tls)
        except OSError as exc:
            raise ListenerUnavailable(f"cannot listen on {listener.host or '0.0.0.0'}:{listener.port}: "
                                      f"{exc.strerror or exc}") from None

    def _register_and_watch(self) -> None:
        cfg, services = self.config, self.services
        host, port = self.advertised
        endpoints = broker_registry.broker_info_json(cfg.broker_id, host, port, cfg.rack, self.endpoints)["endpoints"]
        me = broker_registry.BrokerInfo(cfg.broker_id, host, port, cfg.rack, tuple(endpoints))
        # Joined before the registration (its threads start below), so the registration is withdrawn first.
        self.partitions = services.start("partitions", lambda: PartitionManager(
            self.zk, cfg.broker_id, self.logs, cfg.log_defaults, self_info=me), lambda: self.partitions.close())
        self.registration = services.start("registration", lambda: broker_registry.BrokerRegistration(
            self.zk, cfg.broker_id, host, port, rack=cfg.rack, on_conflict=self._on_registration_conflict,
            listeners=self.endpoints),
            lambda: self.registration.close())
        services.adopt("registration", lambda: self.registration.register(
            wait=cfg.zookeeper_session_timeout_ms / 1000.0 + REGISTRATION_GRACE_S))
        purgatory = Purgatory()
        inter_broker = InterBrokerListener(cfg.inter_broker_listener_name, cfg.ssl_client_context)
        throttles = ReplicationThrottles(cfg.broker_id, cfg.leader_replication_throttled_rate,
                                         cfg.follower_replication_throttled_rate, QuotaWindows(
                                             cfg.replication_quota_window_num, cfg.replication_quota_window_size_seconds))
        self.replicas = ReplicaManager(self.zk, cfg.broker_id, purgatory, self.executor,
                                       replica_lag_time_max_ms=cfg.replica_lag_time_max_ms, inter_broker=inter_broker,
                                       throttles=throttles)
        # TLS when the inter-broker listener speaks it, and the SASL login when it is SASL_*
        self.replicas.fetchers.connect = inter_broker_connector(cfg, inter_broker)
        self.replicas.start(self.loop)
        self.partitions.add_listener(self.replicas.on_snapshot)
        state = BrokerState.build(cfg, self.partitions, cluster_id=self.cluster_id, zk=self.zk, logs=self.logs,
                                  executor=self.executor, loop=self.loop, waiters=purgatory, replicas=self.replicas)
        if cfg.authorizer_class_name:
            cache = services.start("acls", lambda: AclCache(self.zk).start(), lambda: cache.stop())
            state.authorization = Authorization.from_config(cfg, cache)
        for table in (state.transactions.markers.connections, state.transactions.verifier.connections):
            table.inter_broker = inter_broker  # to the other brokers' inter-broker listener, logged in there
            table.connect = self.replicas.fetchers.connect
        self.dispatcher = Dispatcher(state)
        # client quotas (dispatch Rule 7): a watch on the ZooKeeper client, no thread or resource of its own (it
        # ends with the client), so not a service
        QuotaConfigWatch(self.zk, lambda entity, quotas: self._on_loop(state.quotas.update, entity, quotas)).start()
        dynamic = DynamicBrokerConfig(cfg, self.partitions.set_log_defaults,
                                      lambda config: self._on_loop(setattr, state, "config", config))
        throttles = self.replicas.throttles

        def on_broker_configs(default: dict[str, str], own: dict[str, str]) -> None:
            dynamic.on_change(default, own)  # and the replication throttles' rates (quota/replication.py)
            self._on_loop(throttles.set_dynamic, DEFAULT_SCOPE, default)
            self._on_loop(throttles.set_dynamic, BROKER_SCOPE, own)
        BrokerConfigWatch(self.zk, cfg.broker_id, on_broker_configs).start()  # dynamic broker configs, likewise
        self.server.app = self.dispatcher
        offsets = state.offsets  # loads and drops __consumer_offsets partitions after the replica manager's turn
        self.loop.call_soon_threadsafe(offsets.start)
        self.partitions.add_listener(lambda snapshot: self._on_loop(offsets.on_snapshot, snapshot))
        transactions = state.transactions  # loads and drops __transaction_state partitions likewise
        self.loop.call_soon_threadsafe(transactions.start)
        self.partitions.add_listener(lambda snapshot: self._on_loop(transactions.on_snapshot, snapshot))
        services.adopt("partitions", self.partitions.start)
        self.controller = Controller(
            self.zk, cfg.broker_id, unclean_leader_election=cfg.unclean_leader_election_enable,
            auto_leader_rebalance=cfg.auto_leader_rebalance_enable,
            imbalance_check_interval_s=cfg.leader_imbalance_check_interval_seconds,
            imbalance_percentage=cfg.leader_imbalance_per_broker_percentage)
        state.controller = self.controller
        services.start("controller", self.controller.start, self.controller.close)

    def _on_loop(self, fn, *args) -> None:
        """Run `fn(*args)` on the event loop (from any thread); nothing once the loop has closed."""
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: shutting down
            pass

    def _on_registration_conflict(self, exc: Exception) -> None:
        log.error("%s; shutting down", exc)
        self.stop()

    def _install_signal_handlers(self) -> None:
        handlers = {signal.SIGTERM: lambda: self._begin_shutdown("SIGTERM"),
                    signal.SIGINT: lambda: self._begin_shutdown("SIGINT"), signal.SIGUSR1: self.log_reports}
        for signum, handler in handlers.items():
            try:
                self.loop.add_signal_handler(signum, handler)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass

    def log_reports(self) -> None:
        """SIGUSR1: the statistics line, then the api matrix line (which tells readers both are written)."""
        self.log_statistics()
        self.log_api_matrix()

    def log_statistics(self) -> None:
        """One log line: `STATISTICS_MARKER {"broker_id": .., "server": {..ServerStatistics..}, "produce":
        {"fast": .., "grouped": ..}, "fetch": {"fast": ..}, "services": {..}}` (Produce requests of the fast path,
        and of those the ones appended in a group; Fetch requests of the fast path: dispatch.py Rules 4, 5 and 6;
        the background services in start order, services.py Rule 3)."""
        if self.server is None:
            return
        server = dataclasses.asdict(self.server.statistics())
        produce = fetch = None
        if self.dispatcher is not None:
            stats = self.dispatcher.statistics()
            produce = {"fast": stats.fast_produces, "grouped": stats.grouped_produces}
            fetch = {"fast": self.dispatcher.fast_fetches}
        services = None
        if self.services is not None:  # in start order: {name: {"state": .., "threads": [names alive]}}
            services = {s.name: {"state": s.state, "threads": list(s.threads)}
                        for s in self.services.statistics().services}
        log.info("%s %s", STATISTICS_MARKER, json.dumps({"broker_id": self.config.broker_id, "server": server,
                                                         "produce": produce, "fetch": fetch, "services": services}))

    def log_api_matrix(self) -> None:
        """One log line: `API_MATRIX_MARKER {"served": {client: {api: [versions]}}, "refused": ...}`."""
        if self.dispatcher is None:
            return
        stats = self.dispatcher.statistics()
        matrix = {"broker_id": self.config.broker_id, "served": stats.versions_by_client,
                  "refused": stats.refused_by_client}
        log.info("%s %s", API_MATRIX_MARKER, json.dumps(matrix, sort_keys=True))

    # -- shutdown -------------------------------------------------------------------------------------------

    def _close(self) -> None:
        """The reports, then every background service, last started first (services.py Rule 1): the controller,
        the registration, the partitions' watches, the executor, the cleaner reporter, the logs, ZooKeeper, the
        log dirs' lock."""
        try:
            self.log_reports()
        except Exception:  # noqa: BLE001 - close the rest whatever the reports do
            log.exception("error closing %s", "statistics and api matrix")
        self.services.close()

    def _background_error(self, service: str | None, exc: BaseException) -> None:
        """services.py Rule 2: a background thread raised (its traceback follows, from Python's hook)."""
        log.error("background service %s failed: %s: %s", service or "(a thread of no service)",
                  type(exc).__name__, exc)


def raise_open_file_limit() -> int:
    """Raise the soft limit on open files to the hard one (as Go's runtime does at start, and as Kafka's
    operators do with `ulimit -n`): every connection and every log segment is a descriptor, and the soft
    default of many systems (1024) is below what `max.connections` and `max.broker.partitions` allow.
    Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
        return soft
    return hard


def main(config: BrokerConfig) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("open-file limit: %d", raise_open_file_limit())
    if not keep_freed_memory():
        log.info("malloc thresholds unchanged (not glibc): large requests may page-fault fresh memory")
    broker = Broker(config)
    try:
        broker.run()
    except broker_registry.BrokerIdInUse as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (zk_connection.ZooKeeperUnavailable, LogDirInUse, ListenerUnavailable, MetricsListenerUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0

"""The transactional producer's side (KIP-98, librdkafka's and confluent-kafka's API): a `TransactionManager`
the producer owns when `transactional.id` is set.

    p = Producer(bootstrap_servers=..., **{"transactional.id": "app-1", "transaction.timeout.ms": 60000})
    p.init_transactions(30)
    p.begin_transaction()
    p.send("out", b"v")
    p.send_offsets_to_transaction(consumed_offsets, group_metadata)   # optional: consume-transform-produce
    p.commit_transaction()          # or p.abort_transaction()

State machine (the application thread drives it; the sender consults `may_send` on the I/O thread):

    state            call / event                           next state
    ---------------  -------------------------------------  --------------------------------------------
    UNINITIALIZED    init_transactions (InitProducerId)     READY
    READY            begin_transaction                      IN_TRANSACTION
    IN_TRANSACTION   send (AddPartitionsToTxn before a      IN_TRANSACTION
                     partition's first batch goes out)
    IN_TRANSACTION   send_offsets_to_transaction            IN_TRANSACTION (AddOffsetsToTxn, TxnOffsetCommit)
    IN_TRANSACTION   commit_transaction (flush, EndTxn)     READY
    IN_TRANSACTION   prepare_transaction (flush, no EndTxn) PREPARED (KIP-939: another process completes it)
    IN_TRANSACTION   a batch or AddPartitions fails         ABORTABLE_ERROR
    IN_TRANSACTION,  abort_transaction (EndTxn abort)       READY
    ABORTABLE_ERROR
    any              fenced (PRODUCER_FENCED, INVALID_      FATAL_ERROR (only close() is left)
                     PRODUCER_EPOCH), unauthorized

Rule 1 (errors, confluent_kafka.KafkaError's classes): every failure of a transactional call raises
`TransactionError` whose `fatal()`, `txn_requires_abort()` and `retriable()` say what the application may do:
a fatal one leaves only close(); an abortable one needs abort_transaction() then a new transaction; a
retriable one (the call's timeout passed while the coordinator was busy or away) may be called again.
Coordinator errors that are Kafka-retriable (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_
TRANSACTIONS, a lost connection) are retried inside the call until its timeout.
Rule 2 (no hanging transaction): a partition's first batch of a transaction is held by the sender until
AddPartitionsToTxn answered for it (`may_send`), so the coordinator knows every partition its markers must
reach before any of that partition's data is written.
Rule 3 (no send outside a transaction): `send`/`send_many` outside IN_TRANSACTION raise TransactionError (a
state error, fatal() false, as librdkafka's ERR__STATE).
Rule 4 (prepare, KIP-939's two-phase commit): `prepare_transaction()` flushes and returns the
`PreparedTransaction` (transactional id, producer id, epoch); the producer may be closed without aborting, and
`complete_prepared` (any process, any connection) commits or aborts it with EndTxn. A commit of an already
completed commit answers NONE (the coordinator's rule), so completing twice is safe.
Rule: empty-transaction: a transaction that added no partition (nor one in flight) and no offsets is ended by
commit_transaction and abort_transaction without EndTxn, as Kafka's producer and librdkafka end it: the
coordinator never heard of it and would answer INVALID_TXN_STATE. (prepare_transaction always hands over.)
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from sparklog.client.backoff import ExponentialBackoff, Retry
from sparklog.client.errors import COORDINATOR_MOVED_ERRORS, is_retriable
from sparklog.protocol import ApiKey, for_code
from sparklog.protocol.add_offsets_to_txn import AddOffsetsToTxnRequest
from sparklog.protocol.add_partitions_to_txn import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
from sparklog.protocol.end_txn import EndTxnRequest
from sparklog.protocol.find_coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, FindCoordinatorRequest
from sparklog.protocol.init_producer_id import InitProducerIdRequest
from sparklog.protocol.txn_offset_commit import (TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition,
                                                 TxnOffsetCommitRequestTopic)

FIND_COORDINATOR_VERSION = 2
INIT_PRODUCER_ID_VERSION = 1
TXN_VERSION = 3  # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit: the flexible client versions
CONCURRENT_TRANSACTIONS = 51
_RETRIED = COORDINATOR_MOVED_ERRORS | {CONCURRENT_TRANSACTIONS}  # Rule 1: retried inside the call
_FATAL = frozenset({47, 53, 90, 49})  # INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
# PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING: this instance can never transact again


class State(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    PREPARED = "PREPARED"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TransactionError(Exception):
    """A transactional call's failure with confluent_kafka.KafkaError's three questions (Rule 1)."""

    def __init__(self, message: str, *, fatal: bool = False, abortable: bool = False, retriable: bool = False,
                 code: int = -1) -> None:
        super().__init__(message)
        self.code = code
        self._fatal, self._abortable, self._retriable = fatal, abortable, retriable

    def fatal(self) -> bool:
        return self._fatal

    def txn_requires_abort(self) -> bool:
        return self._abortable

    def retriable(self) -> bool:
        return self._retriable


def classify(error: BaseException, what: str) -> TransactionError:
    """A coordinator's or a batch's error as a TransactionError (Rule 1)."""
    if isinstance(error, TransactionError):
        return error
    code = getattr(error, "errno", -1)
    if code in _FATAL:
        return TransactionError(f"{what}: {error} (fatal: this producer is fenced)", fatal=True, code=code)
    if is_retriable(error) or code in _RETRIED:
        return TransactionError(f"{what}: {error} (retriable: call again)", retriable=True, code=code)
    return TransactionError(f"{what}: {error} (abort the transaction)", abortable=True, code=code)


@dataclass(frozen=True)
class PreparedTransaction:
    """Rule 4: what completes a prepared transaction from anywhere."""
    transactional_id: str
    producer_id: int
    producer_epoch: int


class Coordinators:
    """Blocking requests to a transaction's or a group's coordinator over a `NetworkClient` (submit/wait),
    with FindCoordinator first and Kafka-retriable answers retried until the deadline (Rule 1)."""

    def __init__(self, client, backoff: ExponentialBackoff) -> None:
        self.client = client
        self.backoff = backoff
        self.nodes: dict[tuple[str, int], int] = {}

    def node(self, key: str, key_type: int, retry: Retry) -> int:
        found = self._any(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                          FindCoordinatorRequest(key=key, key_type=key_type), retry)
        if found.error_code:
            raise for_code(found.error_code)(f"coordinator of {key!r}")
        self.client.set_nodes({found.node_id: (found.host, found.port)})
        self.nodes[(key, key_type)] = found.node_id
        return found.node_id

    def call(self, key: str, key_type: int, api_key: int, version: int, body, timeout: float,
             code_of: Callable[[Any], int]):
        """The coordinator's response whose `code_of` is NONE; raises the first other error once it is not
        retriable or the timeout passed."""
        retry = Retry(self.backoff, timeout)
        while True:
            try:
                node = self.node(key, key_type, retry)
                response = self.client.submit(node, api_key, version, body).wait(max(0.01, retry.remaining()))
                code = code_of(response)
                if code == 0:
                    return response
                error: BaseException = for_code(code)(f"{ApiKey(api_key).name} of {key!r}")
            except Exception as exc:  # noqa: BLE001 - classified below; a non-retriable one is raised
                error = exc
            if not (is_retriable(error) or getattr(error, "errno", None) in _RETRIED) or retry.expired():
                raise error
            retry.sleep()

    def _any(self, api_key: int, version: int, body, retry: Retry):
        while True:
            node = self.client.least_loaded_node()
            try:
                if node is None:
                    raise ConnectionError(self.client.unreachable())
                return self.client.submit(node, api_key, version, body).wait(max(0.01, retry.remaining()))
            except Exception as exc:
                if not is_retriable(exc) or retry.expired():
                    raise
                retry.sleep()


def _code(response) -> int:
    return response.error_code


def _partition_codes(response) -> int:
    """AddPartitionsToTxn v0-3 / TxnOffsetCommit: the first partition's error, else NONE."""
    topics = getattr(response, "results_by_topic_v3_and_below", None)
    if topics is not None:
        codes = [p.partition_error_code for t in topics for p in t.results_by_partition]
    else:
        codes = [p.error_code for t in response.topics for p in t.partitions]
    return next((c for c in codes if c), 0)


def end_transaction(coordinators: Coordinators, prepared: PreparedTransaction, commit: bool,
                    timeout: float) -> None:
    """EndTxn for (id, producer id, epoch): commit or abort (Rule 4); raises a classified TransactionError."""
    body = EndTxnRequest(transactional_id=prepared.transactional_id, producer_id=prepared.producer_id,
                         producer_epoch=prepared.producer_epoch, committed=commit)
    try:
        coordinators.call(prepared.transactional_id, KEY_TYPE_TRANSACTION, ApiKey.END_TXN, TXN_VERSION, body,
                          timeout, _code)
    except Exception as exc:
        raise classify(exc, f"{'commit' if commit else 'abort'} of {prepared.transactional_id!r}") from exc


def complete_prepared(bootstrap_servers, prepared: Iterable[PreparedTransaction], commit: bool,
                      timeout: float = 60.0, **settings) -> None:
    """Rule 4 from any process: commit (or abort) each prepared transaction with EndTxn on a connection of
    its own. A fenced transaction (its id re-initialised since) raises a fatal TransactionError."""
    from sparklog.client.config import PRODUCER_DEFAULTS, parse_servers, resolve
    from sparklog.client.connection import IOThread, NetworkClient

    config = resolve(PRODUCER_DEFAULTS, settings)
    client = NetworkClient.from_config(parse_servers(bootstrap_servers), config)
    thread = IOThread("sparklog-txn-complete-io", client, lambda: None)
    thread.start()
    try:
        coordinators = Coordinators(client, ExponentialBackoff.retry(config))
        for txn in prepared:
            end_transaction(coordinators, txn, commit, timeout)
    finally:
        thread.stop(timeout=5)
        client.close()


class TransactionManager:
    """See the module docstring. `identity` is the sender's ProducerIdentity (the id and epoch are set here,
    not by InitProducerId without a transactional id); `flush(timeout)` is the producer's."""

    def __init__(self, transactional_id: str, timeout_ms: int, client, identity, flush, backoff) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.identity = identity
        self.coordinators = Coordinators(client, backoff)
        self._client = client
        self._flush = flush
        self._lock = threading.Lock()
        self.state = State.UNINITIALIZED
        self.error: TransactionError | None = None
        self._added: set[tuple[str, int]] = set()  # partitions the coordinator has in this transaction
        self._adding: set[tuple[str, int]] = set()  # in flight
        self._started = False  # Rule: empty-transaction: offsets were added; EndTxn is owed
        self._add_retry_at = 0.0

    # -- the application's calls ---------------------------------------------------------------------------

    def init_transactions(self, timeout: float) -> None:
        self._expect(State.UNINITIALIZED, "init_transactions")
        body = InitProducerIdRequest(transactional_id=self.transactional_id, transaction_timeout_ms=self.timeout_ms)
        response = self._call(ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, body, timeout, _code,
                              "init_transactions")
        self.identity.assume(response.producer_id, response.producer_epoch)
        self.state = State.READY

    def begin_transaction(self) -> None:
        self._expect(State.READY, "begin_transaction")
        with self._lock:
            self._added.clear()
            self._adding.clear()
            self._started = False
            self.error = None
            self.state = State.IN_TRANSACTION

    def send_offsets_to_transaction(self, offsets, group_metadata, timeout: float) -> None:
        self._expect(State.IN_TRANSACTION, "send_offsets_to_transaction")
        group = getattr(group_metadata, "group_id", group_metadata)
        pid, epoch = self.identity.producer_id, self.identity.epoch
        self._call(ApiKey.ADD_OFFSETS_TO_TXN, TXN_VERSION, AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=pid, producer_epoch=epoch, group_id=group),
            timeout, _code, "send_offsets_to_transaction")
        self._started = True
        body = TxnOffsetCommitRequest(transactional_id=self.transactional_id, group_id=group, producer_id=pid,
                                      producer_epoch=epoch, topics=_offset_topics(offsets))
        try:
            self.coordinators.call(group, KEY_TYPE_GROUP, ApiKey.TXN_OFFSET_COMMIT, TXN_VERSION, body, timeout,
                                   _partition_codes)
        except Exception as exc:
            raise self._failed(classify(exc, "send_offsets_to_transaction")) from exc

    def commit_transaction(self, timeout: float) -> None:
        self.prepare_transaction(timeout)
        self._end_started(True, timeout)

    def _end_started(self, commit: bool, timeout: float) -> None:
        """Rule: empty-transaction: EndTxn only for a transaction the coordinator has (a partition or offsets
        added); one it never heard of just ends here."""
        prepared = PreparedTransaction(self.transactional_id, self.identity.producer_id, self.identity.epoch)
        if self._started or self._added or self._adding:
            self._end(prepared, commit, timeout)
        else:
            self.state = State.READY

    def prepare_transaction(self, timeout: float) -> PreparedTransaction:
        """Rule 4: every record of the transaction acknowledged; the transaction left open, PREPARED."""
        self._expect(State.IN_TRANSACTION, "commit_transaction")
        try:
            self._flush(timeout)
        except TimeoutError as exc:
            raise TransactionError(f"commit_transaction: {exc} (retriable: call again)", retriable=True) from exc
        if self.error is not None:
            raise self.error
        self.state = State.PREPARED
        return PreparedTransaction(self.transactional_id, self.identity.producer_id, self.identity.epoch)

    def abort_transaction(self, timeout: float) -> None:
        if self.state not in (State.IN_TRANSACTION, State.ABORTABLE_ERROR, State.PREPARED):
            self._expect(State.IN_TRANSACTION, "abort_transaction")
        try:
            self._flush(timeout)  # the batches in flight end (acknowledged or failed) before the marker
        except TimeoutError as exc:
            raise TransactionError(f"abort_transaction: {exc} (retriable: call again)", retriable=True) from exc
        failed, self.state = self.error is not None, State.IN_TRANSACTION
        self._end_started(False, timeout)
        if failed:  # a batch failed: its partition's sequences are unknown; a new epoch restarts them (KIP-360)
            self.state = State.UNINITIALIZED
            self.init_transactions(timeout)

    def check_can_send(self) -> None:
        """Rule 3."""
        if self.state is not State.IN_TRANSACTION:
            raise TransactionError(f"send outside a transaction (state {self.state.value}): call "
                                   "begin_transaction() first", fatal=self.state is State.FATAL_ERROR)

    # -- the sender's hooks (I/O thread) ----------------------------------------------------------------------

    def may_send(self, tp: tuple[str, int]) -> bool:
        """Rule 2: True once `tp` is in the transaction; else AddPartitionsToTxn is sent (once) and False."""
        if tp in self._added:
            return True
        with self._lock:
            self._adding.add(tp)
            if len(self._adding) == 1 or time.monotonic() >= self._add_retry_at:
                self._send_add_partitions()
        return False

    def refuses(self, tp: tuple[str, int]) -> bool:
        """A batch of a partition not in the transaction, after the transaction failed: fail it unsent."""
        return self.error is not None and tp not in self._added

    def batch_failed(self, error: BaseException) -> None:
        """A batch of the transaction failed: the transaction can only be aborted."""
        self._failed(classify(error, "a record of the transaction was not written"))

    # -- internals --------------------------------------------------------------------------------------------

    def _send_add_partitions(self) -> None:
        node = self.coordinators.nodes.get((self.transactional_id, KEY_TYPE_TRANSACTION))
        wanted = sorted(self._adding - self._added)
        if node is None or not wanted:
            return
        self._add_retry_at = time.monotonic() + 60.0  # one request in flight; its answer resets this
        topics: dict[str, list[int]] = {}
        for topic, partition in wanted:
            topics.setdefault(topic, []).append(partition)
        body = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id, v3_and_below_producer_id=self.identity.producer_id,
            v3_and_below_producer_epoch=self.identity.epoch,
            v3_and_below_topics=[AddPartitionsToTxnTopic(name=t, partitions=p) for t, p in topics.items()])
        self._client.submit(node, ApiKey.ADD_PARTITIONS_TO_TXN, TXN_VERSION, body,
                            callback=lambda future: self._on_added(future, wanted), wake=False)

    def _on_added(self, future, wanted: list) -> None:
        error = future.error
        code = 0 if error is not None else _partition_codes(future.value)
        with self._lock:
            if error is None and code == 0:
                self._added.update(wanted)
                self._adding.difference_update(wanted)
                self._add_retry_at = 0.0
                return
            error = error or for_code(code)("AddPartitionsToTxn")
            if is_retriable(error) or code in _RETRIED:
                self._add_retry_at = time.monotonic() + 0.05
                if code in COORDINATOR_MOVED_ERRORS:
                    self.coordinators.nodes.pop((self.transactional_id, KEY_TYPE_TRANSACTION), None)
                return
        self._failed(classify(error, "AddPartitionsToTxn"))

    def _end(self, prepared: PreparedTransaction, commit: bool, timeout: float) -> None:
        try:
            end_transaction(self.coordinators, prepared, commit, timeout)
        except TransactionError as exc:
            if exc.fatal():
                self._failed(exc)
            raise
        self.state = State.READY

    def _call(self, api_key: int, version: int, body, timeout: float, code_of, what: str):
        try:
            return self.coordinators.call(self.transactional_id, KEY_TYPE_TRANSACTION, api_key, version, body,
                                          timeout, code_of)
        except Exception as exc:
            raise self._failed(classify(exc, what)) from exc

    def _failed(self, error: TransactionError) -> TransactionError:
        with self._lock:
            if error.fatal():
                self.state = State.FATAL_ERROR
            elif self.state is State.IN_TRANSACTION and not error.retriable():
                self.state = State.ABORTABLE_ERROR
                error._abortable = True
            if self.error is None or error.fatal():
                self.error = error
        return error

    def _expect(self, state: State, what: str) -> None:
        if self.state is State.FATAL_ERROR:
            raise TransactionError(f"{what}: the producer had a fatal error ({self.error})", fatal=True)
        if self.state is State.ABORTABLE_ERROR:
            raise TransactionError(f"{what}: the transaction failed ({self.error}); abort_transaction() first",
                                   abortable=True)
        if self.state is not state:
            raise TransactionError(f"{what}: not allowed in state {self.state.value}")


def _offset_topics(offsets) -> list:
    """confluent-kafka's [TopicPartition(topic, partition, offset)] (or (topic, partition, offset) tuples)."""
    topics: dict[str, list] = {}
    for item in offsets:
        topic, partition, offset = (item if isinstance(item, tuple)
                                    else (item.topic, item.partition, item.offset))
        topics.setdefault(topic, []).append(TxnOffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_metadata=""))
    return [TxnOffsetCommitRequestTopic(name=t, partitions=p) for t, p in topics.items()]

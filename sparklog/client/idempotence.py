"""The idempotent producer's side (design notes 4.6, KIP-98): a producer id and epoch from InitProducerId, and a
sequence number per partition, so the broker can drop a batch the producer resent after losing the answer.

Rule 1 (configuration, Kafka >= 3.2's rule): `enable.idempotence` defaults to true and then implies
acks=all, retries > 0 and max.in.flight.requests.per.connection <= 5 (the broker remembers five batches per
producer). Set explicitly to true with a conflicting setting, it is a configuration error; left at its
default, a conflicting setting given explicitly turns idempotence off (a warning), as Kafka's producer does.
Rule 2 (identity): no batch is sent before InitProducerId answered; until then the sender holds them.
Rule 3 (sequences): a batch gets its partition's next sequence when it is built, once: a retry resends the
same bytes with the same (producer id, epoch, sequence), which the broker acknowledges with the original
offset if the first attempt landed.
Rule 4 (errors): OUT_OF_ORDER_SEQUENCE_NUMBER for a batch whose partition has an earlier batch not yet
acknowledged is retriable (that earlier batch failed or is still in flight: this one follows it); for the
next batch after the acknowledged ones it means the broker lost the state, as does INVALID_PRODUCER_EPOCH:
the batch fails, and the producer takes a new producer id (its sequences restart at 0) for later batches.

Rule 5 (transactional.id set): the transaction manager (transactions.py) takes the id and epoch from the
transaction coordinator and hands them over with `assume`; this class then never asks for an id itself, and
a failed batch leaves the id alone (the transaction is aborted and the manager bumps the epoch).

States: NO_ID --InitProducerId sent--> REQUESTING --answer--> HAS_ID --fatal sequence error--> NO_ID.
Used by the sender on the producer's I/O thread only: not thread-safe.
"""

from __future__ import annotations

import logging
import time

from sparklog.client.backoff import ExponentialBackoff
from sparklog.protocol import ApiKey, InitProducerIdRequest, for_code
from sparklog.protocol.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError

logger = logging.getLogger(__name__)

INIT_PRODUCER_ID_VERSION = 1  # highest InitProducerId version of the shared codec
MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5  # Kafka's limit: the broker dedups against a producer's last five batches
NO_PRODUCER_ID = -1
TRANSACTION_TIMEOUT_MS = 60_000  # transaction.timeout.ms: Kafka's default; unused without a transactional id
SEQUENCE_LIMIT = 2**31  # sequences wrap from 2**31-1 to 0 (Kafka's DefaultRecordBatch.incrementSequence)


class IdempotenceConfigError(ValueError):
    """enable.idempotence=true with acks, retries or max.in.flight settings that cannot keep its promise."""


def configure(config: dict, given: dict) -> bool:
    """Apply Rule 1 to the resolved `config` (the user's `given` settings decide what was explicit);
    return whether the producer is idempotent."""
    conflicts = []
    if "acks" in given and config["acks"] != -1:
        conflicts.append(f"acks={given['acks']}")
    if "retries" in given and config["retries"] < 1:
        conflicts.append(f"retries={config['retries']}")
    if config["max.in.flight.requests.per.connection"] > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
        conflicts.append(f"max.in.flight.requests.per.connection={config['max.in.flight.requests.per.connection']}")
    if not config["enable.idempotence"]:
        return False
    if conflicts:
        if "enable.idempotence" in given:
            raise IdempotenceConfigError(f"enable.idempotence=true needs acks=all, retries > 0 and "
                                         f"max.in.flight.requests.per.connection <= 5, not {', '.join(conflicts)}")
        logger.warning("idempotence disabled by %s (set enable.idempotence=false to silence this)",
                       ", ".join(conflicts))
        config["enable.idempotence"] = False
        return False
    config["acks"] = -1
    return True


class ProducerIdentity:
    """The producer id, epoch and per-partition sequences of an idempotent producer (module docstring)."""

    def __init__(self, config: dict) -> None:
        self.producer_id = NO_PRODUCER_ID
        self.epoch = -1
        self.requesting = False
        self._next_sequence: dict[tuple[str, int], int] = {}
        self._acked: dict[tuple[str, int], int] = {}  # the sequence after the last acknowledged batch
        self._retry_at = 0.0
        self._failures = 0
        self._backoff = ExponentialBackoff.retry(config)
        self.last_error: BaseException | None = None
        self.transactional = False  # Rule 5

    def assume(self, producer_id: int, epoch: int) -> None:
        """Rule 5: the transaction coordinator's id and epoch; every partition's sequence restarts at 0."""
        self._next_sequence.clear()
        self._acked.clear()
        self.producer_id, self.epoch = producer_id, epoch

    @property
    def ready(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    def request_id(self, client) -> None:
        """Send InitProducerId to the least loaded broker unless one is in flight or backing off (Rule 2)."""
        now = time.monotonic()
        if self.requesting or now < self._retry_at or self.transactional:
            return
        node = client.least_loaded_node()
        if node is None:
            return
        self.requesting = True
        request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=TRANSACTION_TIMEOUT_MS)
        client.submit(node, ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, request, callback=self._on_id,
                      wake=False)

    def _on_id(self, future) -> None:
        self.requesting = False
        error = future.error
        if error is None and future.value.error_code:
            error = for_code(future.value.error_code)("InitProducerId")
        if error is not None:
            self.last_error = error
            self._retry_at = time.monotonic() + self._backoff.delay(self._failures)
            self._failures += 1
            logger.info("InitProducerId failed (%s); retrying", error)
            return
        self._failures = 0
        self.producer_id, self.epoch = future.value.producer_id, future.value.producer_epoch
        self._next_sequence.clear()
        self._acked.clear()

    def assign(self, tp: tuple[str, int], count: int) -> int:
        """The base sequence of a new batch of `count` records for `tp` (Rule 3)."""
        sequence = self._next_sequence.get(tp, 0)
        self._next_sequence[tp] = (sequence + count) % SEQUENCE_LIMIT
        return sequence

    def acknowledged(self, tp: tuple[str, int], producer_id: int, base_sequence: int, count: int) -> None:
        if producer_id == self.producer_id:
            self._acked[tp] = (base_sequence + count) % SEQUENCE_LIMIT

    def retriable(self, tp: tuple[str, int], producer_id: int, base_sequence: int, error: BaseException) -> bool:
        """Rule 4: is this sequence error one an earlier batch of `tp` explains?"""
        if not isinstance(error, OutOfOrderSequenceNumberError) or producer_id != self.producer_id:
            return False
        return base_sequence != self._acked.get(tp, 0)

    def failed(self, producer_id: int, error: BaseException) -> None:
        """A batch failed for good: later batches would all be out of order, so take a new id (Rule 4)."""
        if producer_id == self.producer_id and producer_id != NO_PRODUCER_ID and not self.transactional:
            logger.warning("producer id %d: a batch failed (%r); taking a new producer id", producer_id, error)
            self.producer_id, self.epoch = NO_PRODUCER_ID, -1

    @staticmethod
    def is_sequence_error(error: BaseException) -> bool:
        return isinstance(error, (OutOfOrderSequenceNumberError, InvalidProducerEpochError))

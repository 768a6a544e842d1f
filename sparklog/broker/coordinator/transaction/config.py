"""The transaction coordinator's settings, with Kafka's names and defaults (declared here in `TRANSACTION`, part
of config.py's broker table).

Rule: a bad value is a `ConfigError` naming the key, as for every broker setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from sparklog.settings import BOOLEAN, INT, SHORT, Definitions, Setting

DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900000  # transaction.max.timeout.ms (15 minutes)
DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS = 604800000  # transactional.id.expiration.ms (7 days)
DEFAULT_STATE_LOG_NUM_PARTITIONS = 50  # transaction.state.log.num.partitions
DEFAULT_STATE_LOG_REPLICATION_FACTOR = 3  # transaction.state.log.replication.factor
DEFAULT_STATE_LOG_MIN_ISR = 2  # transaction.state.log.min.isr
DEFAULT_STATE_LOG_SEGMENT_BYTES = 104857600  # transaction.state.log.segment.bytes (100 MiB)
DEFAULT_STATE_LOG_LOAD_BUFFER_SIZE = 5242880  # transaction.state.log.load.buffer.size (5 MiB)
DEFAULT_ABORT_TIMED_OUT_INTERVAL_MS = 10000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
DEFAULT_REMOVE_EXPIRED_INTERVAL_MS = 3600000  # transaction.remove.expired.transaction.cleanup.interval.ms


class TransactionConfigError(ValueError):
    """A transaction.* setting has a value the coordinator cannot use."""


TRANSACTION = Definitions("transaction coordinator", (
    Setting("transaction.max.timeout.ms", INT, DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
            "the longest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above)", low=1),
    Setting("transactional.id.expiration.ms", INT, DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
            "how long a transactional id without a transaction open is kept after its last transition", low=1),
    Setting("transaction.state.log.num.partitions", INT, DEFAULT_STATE_LOG_NUM_PARTITIONS,
            "partitions of __transaction_state: spreads transactional ids over coordinators", low=1),
    Setting("transaction.state.log.replication.factor", SHORT, DEFAULT_STATE_LOG_REPLICATION_FACTOR,
            "replicas of each __transaction_state partition; fewer (with a warning) while fewer brokers are live",
            low=1),
    Setting("transaction.state.log.min.isr", INT, DEFAULT_STATE_LOG_MIN_ISR,
            "min.insync.replicas of __transaction_state (at most its replication factor)", low=1),
    Setting("transaction.state.log.segment.bytes", INT, DEFAULT_STATE_LOG_SEGMENT_BYTES,
            "segment size of __transaction_state, kept small so compaction and loading stay fast", low=1),
    Setting("transaction.state.log.load.buffer.size", INT, DEFAULT_STATE_LOG_LOAD_BUFFER_SIZE,
            "bytes read at a time when loading a __transaction_state partition", low=1),
    Setting("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, DEFAULT_ABORT_TIMED_OUT_INTERVAL_MS,
            "how often the coordinator aborts the transactions open longer than their timeout", low=1),
    Setting("transaction.remove.expired.transaction.cleanup.interval.ms", INT, DEFAULT_REMOVE_EXPIRED_INTERVAL_MS,
            "how often the coordinator removes the transactional ids past transactional.id.expiration.ms", low=1),
    Setting("transaction.partition.verification.enable", BOOLEAN, True,
            "a partition leader asks the transaction coordinator whether a partition is in the producer's ongoing "
            "transaction before its first transactional write (KIP-890 part 1: no hanging transactions)"),
), error=TransactionConfigError)


@dataclass(frozen=True)
class TransactionConfig:
    max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS
    id_expiration_ms: int = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS
    num_partitions: int = DEFAULT_STATE_LOG_NUM_PARTITIONS
    replication_factor: int = DEFAULT_STATE_LOG_REPLICATION_FACTOR
    min_isr: int = DEFAULT_STATE_LOG_MIN_ISR
    segment_bytes: int = DEFAULT_STATE_LOG_SEGMENT_BYTES
    load_buffer_size: int = DEFAULT_STATE_LOG_LOAD_BUFFER_SIZE
    abort_timed_out_interval_ms: int = DEFAULT_ABORT_TIMED_OUT_INTERVAL_MS
    remove_expired_interval_ms: int = DEFAULT_REMOVE_EXPIRED_INTERVAL_MS
    partition_verification_enable: bool = True  # verifier.py

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "TransactionConfig":
        return cls(*TRANSACTION.values_of(props))

"""client/transactions.py without a broker: the error classes (confluent_kafka.KafkaError's three questions)
and the state table's refusals."""

from __future__ import annotations

import types

import pytest

from sparklog.client.transactions import State, TransactionError, TransactionManager, classify
from sparklog.protocol import for_code


@pytest.mark.parametrize("code, fatal, abortable, retriable", [
    (90, True, False, False),   # PRODUCER_FENCED
    (47, True, False, False),   # INVALID_PRODUCER_EPOCH
    (53, True, False, False),   # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    (51, False, False, True),   # CONCURRENT_TRANSACTIONS
    (16, False, False, True),   # NOT_COORDINATOR
    (7, False, False, True),    # REQUEST_TIMED_OUT
    (10, False, True, False),   # MESSAGE_TOO_LARGE: a record failed, the transaction must be aborted
    (48, False, True, False),   # INVALID_TXN_STATE
])
def test_each_error_has_one_class(code, fatal, abortable, retriable):
    error = classify(for_code(code)("x"), "call")
    assert (error.fatal(), error.txn_requires_abort(), error.retriable()) == (fatal, abortable, retriable)


def manager() -> TransactionManager:
    identity = types.SimpleNamespace(producer_id=7, epoch=0, assume=lambda pid, epoch: None)
    return TransactionManager("t", 60_000, client=None, identity=identity, flush=lambda timeout: None,
                              backoff=None)


def test_the_table_refuses_every_call_out_of_its_state():
    m = manager()
    with pytest.raises(TransactionError, match="not allowed in state UNINITIALIZED"):
        m.begin_transaction()
    with pytest.raises(TransactionError, match="outside a transaction"):
        m.check_can_send()
    m.state = State.READY
    m.begin_transaction()
    m.check_can_send()
    with pytest.raises(TransactionError, match="not allowed in state IN_TRANSACTION"):
        m.begin_transaction()


def test_a_failed_batch_makes_the_transaction_abortable_and_fenced_makes_it_fatal():
    m = manager()
    m.state = State.IN_TRANSACTION
    m.batch_failed(for_code(10)("too large"))
    assert m.state is State.ABORTABLE_ERROR and m.refuses(("t", 0))
    with pytest.raises(TransactionError) as failure:
        m.prepare_transaction(1)
    assert failure.value.txn_requires_abort()
    m.batch_failed(for_code(90)("fenced"))
    assert m.state is State.FATAL_ERROR
    with pytest.raises(TransactionError) as failure:
        m.begin_transaction()
    assert failure.value.fatal()

"""The exactly-once sink's options (options.py, exactly_once.py): exactly-once without a prefix, an unknown
guarantee, a prefix that cannot name a topic, a bad batchId and a transactional.id of the user's are refused
in one line; at-least-once stays the default; a decision survives its JSON."""

from __future__ import annotations

import pytest

from sparklog.datasource.exactly_once import DECIDING, Decision
from sparklog.datasource.options import AT_LEAST_ONCE, EXACTLY_ONCE, SparklogOptionError, parse_write_options

BASE = {"kafka.bootstrap.servers": "h:1", "topic": "t"}


def test_at_least_once_is_the_default_and_exactly_once_takes_its_prefix():
    assert parse_write_options(BASE).delivery_guarantee == AT_LEAST_ONCE
    options = parse_write_options({**BASE, "deliveryGuarantee": "exactly-once", "transactionalIdPrefix": "p-1",
                                   "batchId": "7"})
    assert (options.delivery_guarantee, options.transactional_id_prefix, options.batch_id) == (EXACTLY_ONCE, "p-1", 7)


@pytest.mark.parametrize("extra, message", [
    ({"deliveryGuarantee": "exactly-once"}, "deliveryGuarantee exactly-once needs the option transactionalIdPrefix"),
    ({"deliveryGuarantee": "once"}, "Invalid value 'once' for option 'deliveryGuarantee'"),
    ({"deliveryGuarantee": "exactly-once", "transactionalIdPrefix": "a/b"}, "option 'transactionalIdPrefix'"),
    ({"batchId": "x"}, "Invalid value 'x' for option 'batchId'"),
    ({"kafka.transactional.id": "mine"}, "Kafka option 'transactional.id' is not supported"),
])
def test_each_mistake_is_refused_in_one_line(extra, message):
    with pytest.raises(SparklogOptionError, match=message) as failure:
        parse_write_options({**BASE, **extra})
    assert "\n" not in str(failure.value)


def test_a_decision_survives_its_encoding():
    decision = Decision(3, DECIDING, (("p-0", 1000, 2), ("p-1", 1001, 0)))
    assert Decision.decode(decision.encode()) == decision

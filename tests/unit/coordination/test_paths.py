import pytest

from sparklog.coordination import paths
from sparklog.coordination.paths import InvalidName, InvalidTopicName


def test_layout():
    assert paths.broker(3) == "/brokers/ids/3"
    assert paths.topic("orders") == "/brokers/topics/orders"
    assert paths.partition_state("orders", 2) == "/brokers/topics/orders/partitions/2/state"
    assert paths.topic_config("orders") == "/config/topics/orders"
    assert paths.offset("g", "orders", 1) == "/consumers/g/offsets/orders/1"
    assert paths.owner("g", "orders", 1) == "/consumers/g/owners/orders/1"
    assert paths.consumer("g", "c-1") == "/consumers/g/ids/c-1"


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "a b", "x" * 250, "é"])
def test_topic_names_cannot_escape(name):
    with pytest.raises(InvalidTopicName):
        paths.topic(name)


def test_invalid_topic_name_is_a_value_error():
    assert issubclass(InvalidTopicName, ValueError)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "tab\there", "x" * 256])
def test_group_names_cannot_escape(name):
    with pytest.raises(InvalidName):
        paths.group(name)


def test_group_names_may_hold_what_kafka_allows():
    assert paths.group("my group:1") == "/consumers/my group:1"


@pytest.mark.parametrize("bad", [-1, True, "1", 1.0])
def test_partition_and_broker_numbers(bad):
    with pytest.raises(ValueError):
        paths.partition_state("t", bad)
    with pytest.raises(ValueError):
        paths.broker(bad)

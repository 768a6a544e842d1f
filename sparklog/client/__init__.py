"""Clients: a batching producer, a pull consumer, Kafka consumer groups and ZooKeeper consumer groups.

    from sparklog.client import Producer, Consumer, KafkaGroupConsumer, GroupConsumer, Message, MessageSet

Names are imported on first use, so a Spark worker that needs only the Consumer does not pay for kazoo
and the group machinery at start-up.
"""

from importlib import import_module

_EXPORTS = {
    "Producer": "producer",
    "Consumer": "consumer",
    "OffsetOutOfRange": "consumer",
    "NoOffsetForPartition": "consumer",
    "RecordFuture": "futures",
    "RecordMetadata": "futures",
    "GroupConsumer": "group",
    "KafkaGroupConsumer": "kafka_group_consumer",
    "MessageStream": "group",
    "ConsumerRecord": "message",
    "Message": "message",
    "MessageSet": "message",
    "TransactionError": "transactions",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sparklog.client' has no attribute {name!r}")
    value = getattr(import_module(f"sparklog.client.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value

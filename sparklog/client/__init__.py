"""Clients: a batching producer, a pull consumer and ZooKeeper consumer groups.

    from sparklog.client import Producer, Consumer, GroupConsumer, Message, MessageSet
"""

from sparklog.client.consumer import Consumer, NoOffsetForPartition, OffsetOutOfRange
from sparklog.client.futures import RecordFuture, RecordMetadata
from sparklog.client.group import GroupConsumer, MessageStream
from sparklog.client.message import ConsumerRecord, Message, MessageSet
from sparklog.client.producer import Producer

__all__ = ["Producer", "Consumer", "GroupConsumer", "MessageStream", "Message", "MessageSet", "ConsumerRecord",
           "RecordFuture", "RecordMetadata", "OffsetOutOfRange", "NoOffsetForPartition"]

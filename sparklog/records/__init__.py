"""The RecordBatch v2 codec, the bottom layer: producers, brokers, logs and consumers all speak it.

`batch` builds, validates and decodes batches; `compression` holds the codecs of the records section. Like
Kafka's `common/record` and kafka-python's `kafka/record/`, it imports nothing else of sparklog, so a client
that only encodes batches never loads the log machinery.
"""

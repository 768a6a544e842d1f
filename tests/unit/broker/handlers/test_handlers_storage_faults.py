"""Fetch against damage the scrubber has not fenced yet: a retriable error, never the damaged bytes."""

from unit.broker.handlers.test_handlers import batch, fetch, logs, parts_of, produce, state  # noqa: F401 - fixtures

from sparklog.broker import handlers


def test_a_fetch_that_meets_unfenced_damage_answers_kafka_storage_error(state):  # noqa: F811
    produce(state, [(0, batch(b"a", b"b"))])
    plog = state.partitions.snapshot.leading[("t", 0)]
    segment = plog.segments[-1]
    with open(segment.path, "r+b") as f:  # the batch's baseOffset: outside its CRC, caught by the structure check
        f.seek(7)
        f.write(b"\x09")
    parts = parts_of(fetch(state, [("t", 0, 0), ("t", 1, 0)]))
    assert parts[0].error_code == handlers.KAFKA_STORAGE_ERROR and len(parts[0].records) == 0
    assert parts[1].error_code == 0  # the other partition is served as usual

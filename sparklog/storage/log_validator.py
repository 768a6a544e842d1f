"""Converting a producer's batches to what the log's config asks for, before they are stored (Kafka's
LogValidator): the timestamp type, the timestamp bounds and the topic's compression codec.

Rule: validate-before-convert: nothing is converted before it is validated: the caller passes batches whose size, magic
and CRC were checked, so a corrupt batch is refused (CorruptRecordError), never re-signed with a fresh CRC.
Rule: create-time-bounds: with message.timestamp.type=CreateTime, every record's timestamp must lie within
[now - before, now + after] (message.timestamp.before/after.max.ms, and the older difference.max.ms); one
outside fails the whole append with InvalidTimestampError (Kafka's INVALID_TIMESTAMP) and nothing is stored;
its `record_errors` name each record outside (Rule: per-record-errors).
Rule: log-append-time-stamped: with LogAppendTime, each batch gets the timestampType bit and maxTimestamp = the append
time, and a new CRC (both fields are inside the CRC); the records' own timestamp deltas stay as sent, as in Kafka's
in-place path (readers give every record of such a batch its maxTimestamp).
Rule: broker-codec: with compression.type other than `producer`, a batch in another codec is decoded and rebuilt in the
topic's codec (`uncompressed` is none), keeping its producer id, epoch, sequence and transactional flag;
offset deltas become 0..n-1, as a producer's batch has them already. Control batches are kept as sent.
Rule: compacted-needs-keys: with cleanup.policy containing `compact`, every record of a data batch must have a key (the
cleaner keeps the last value per key): a null key fails the whole append with InvalidRecordError (Kafka's
INVALID_RECORD, "Compacted topic cannot accept message without key"), its `record_errors` naming each such
record. Control batches are not checked.
Rule: per-record-errors (KIP-467): the checks that fault single records (the two above, as in Kafka's
LogValidator) name them in the error's `record_errors` as (batch index, message): the index counts the records
of the append from 0 across its batches (Kafka takes one batch per partition, whose own index it is), and the
error's message is Kafka's summary of the first three. The Produce answer carries them (KIP-467), so a client
fails the records named and retries or fails the others on its own terms (librdkafka: _INVALID_DIFFERENT_RECORD).
Rule: client-log-append-time (a client's batch saying LogAppendTime, which is the broker's to set; Kafka's
LogValidator): refused with InvalidTimestampError ("Producer should not set timestamp type to LogAppendTime"; Kafka's INVALID_TIMESTAMP)
when the topic stamps the append time itself or the batch has no timestamp (maxTimestamp -1, which its
records take); otherwise taken as CreateTime, the topic's type, with its maxTimestamp kept, as Kafka rewrites
it. Checked by `take_client_timestamp_type` before the append, the CRC verified before the header is re-signed.
Rule: no-conversion-by-default: with the defaults (CreateTime, no bounds, `producer`, `delete`) `converter_for` returns
None: append pays nothing.
"""

from __future__ import annotations

import struct

from sparklog.records import BytesLike
from sparklog.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    NO_TIMESTAMP,
    CorruptRecordError,
    build_batch,
    compute_crc,
    decode_varint,
    iter_batches,
    peek_size,
    validate_batch,
)
from sparklog.records.compression import codec_id, decompress
from sparklog.storage.config import (
    CLEANUP_COMPACT,
    COMPRESSION_PRODUCER,
    COMPRESSION_UNCOMPRESSED,
    LOG_APPEND_TIME,
    LONG_MAX,
    LogConfig,
)
from sparklog.storage.errors import InvalidRecordError, InvalidTimestampError, rejected_records

_MAX_TIMESTAMP_OFFSET = ATTRIBUTES_OFFSET + struct.calcsize(">hiq")  # after attributes, lastOffsetDelta, baseTimestamp
_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")


def converter_for(config: LogConfig) -> "AppendConverter | None":
    """The converter a log with this config needs, or None when batches are stored as sent (Rule:
    no-conversion-by-default)."""
    converter = AppendConverter(config)
    return converter if converter.active else None


class AppendConverter:
    """Applies Rule: create-time-bounds, Rule: log-append-time-stamped, Rule: broker-codec and Rule:
    compacted-needs-keys to the validated batches of one append."""

    def __init__(self, config: LogConfig) -> None:
        self.keys_required = CLEANUP_COMPACT in config.cleanup_policies
        self.log_append_time = config.message_timestamp_type == LOG_APPEND_TIME
        self.before_ms, self.after_ms = config.timestamp_bounds_ms
        self.bounded = not self.log_append_time and (self.before_ms < LONG_MAX or self.after_ms < LONG_MAX)
        codec = config.compression_type
        self.codec = None if codec == COMPRESSION_PRODUCER else codec_id(
            "none" if codec == COMPRESSION_UNCOMPRESSED else codec)
        self.active = self.log_append_time or self.bounded or self.codec is not None or self.keys_required

    def convert(self, data: bytearray, batches: list[tuple[int, BatchHeader]], now_ms: int) -> bytearray:
        """The batches as the log stores them; `batches` are the (position, header) of each in `data`.

        Without recompression `data` itself is returned, stamped in place (the log owns it: append copies
        any buffer but a bytearray, whose baseOffset fields it overwrites anyway)."""
        if self.bounded:
            self._check_timestamps(data, batches, now_ms)
        if self.keys_required:
            _check_keys(data, batches)
        if self.codec is None or all(h.compression == self.codec or h.is_control for _, h in batches):
            if self.log_append_time:
                for position, _ in batches:
                    stamp_log_append_time(data, now_ms, position)
            return data
        out = bytearray()
        view = memoryview(data)
        for position, header in batches:
            raw: BytesLike = view[position:position + header.size]
            if header.compression != self.codec and not header.is_control:
                raw = self._recompress(view[position:position + header.size], header)
            if self.log_append_time:
                raw = bytearray(raw)
                stamp_log_append_time(raw, now_ms)
            out += raw
        return out

    def _check_timestamps(self, data: bytearray, batches: list[tuple[int, BatchHeader]], now_ms: int) -> None:
        """Rule: create-time-bounds; the records outside are looked for only in a batch whose range is out."""
        record_errors, first = [], 0
        for position, header in batches:
            if not header.is_control:
                raw = memoryview(data)[position:position + header.size]
                low, high = timestamp_range(raw, header)
                if now_ms - low > self.before_ms or high - now_ms > self.after_ms:
                    record_errors += self._outside(raw, first, now_ms)
            first += header.record_count
        if record_errors:
            raise InvalidTimestampError(f"{rejected_records(record_errors)}; a timestamp must lie within "
                                        f"message.timestamp.before.max.ms={self.before_ms} / after.max.ms="
                                        f"{self.after_ms} of the broker's clock ({now_ms})", tuple(record_errors))

    def _outside(self, raw: memoryview, first: int, now_ms: int) -> list[tuple[int, str]]:
        """(index in the append, Kafka's message) of each record of one batch outside the bounds."""
        lowest, highest = now_ms - self.before_ms, now_ms + self.after_ms
        timestamps = next(iter_batches(raw, check_crc=False)).columns().timestamps
        return [(first + i, f"Timestamp {t} of message with offset {i} is out of range. The timestamp should be "
                            f"within [{lowest}, {highest}]") for i, t in enumerate(timestamps)
                if not lowest <= t <= highest]

    def _recompress(self, raw: memoryview, header: BatchHeader) -> bytes:
        batch = next(iter_batches(raw, check_crc=False))
        assert self.codec is not None  # only a config naming a codec recompresses
        return build_batch(batch.records(), compression=self.codec, base_offset=header.base_offset,
                           producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                           base_sequence=header.base_sequence,
                           partition_leader_epoch=header.partition_leader_epoch,
                           is_transactional=header.is_transactional)


NULL_KEY_REFUSED = "Compacted topic cannot accept message without key (cleanup.policy=compact)"


def _check_keys(data: bytearray, batches: list[tuple[int, BatchHeader]]) -> None:
    """Rule: compacted-needs-keys: the data batches of a compacted topic hold no record without a key."""
    record_errors, first = [], 0
    for position, header in batches:
        if not header.is_control:
            batch = next(iter_batches(memoryview(data)[position:position + header.size], check_crc=False))
            record_errors += [(first + i, NULL_KEY_REFUSED) for i, key in enumerate(batch.columns().keys)
                              if key is None]
        first += header.record_count
    if record_errors:
        raise InvalidRecordError(rejected_records(record_errors), tuple(record_errors))


def timestamp_range(raw: memoryview, header: BatchHeader) -> tuple[int, int]:
    """(lowest, highest) record timestamp of one checked batch, reading only each record's length and
    timestampDelta (keys, values and headers are skipped, never copied); malformed records raise
    CorruptRecordError."""
    section: BytesLike = raw[HEADER_SIZE:]
    if header.compression:
        try:
            section = decompress(header.compression, section)
        except ValueError as exc:
            raise CorruptRecordError(f"batch at offset {header.base_offset}: {exc}") from exc
    end, position, low, high = len(section), 0, LONG_MAX, -LONG_MAX
    try:
        for _ in range(header.record_count):
            length, start = decode_varint(section, position)
            delta, _ = decode_varint(section, start + 1)  # after the record's attributes byte
            position = start + length
            if length < 2 or position > end:
                raise CorruptRecordError(f"record of {length} bytes overruns the batch at offset "
                                         f"{header.base_offset}")
            low, high = min(low, delta), max(high, delta)
    except IndexError:
        raise CorruptRecordError(f"records overrun the batch at offset {header.base_offset}") from None
    return header.base_timestamp + low, header.base_timestamp + high


def stamp_log_append_time(batch: bytearray, now_ms: int, position: int = 0) -> None:
    """Mark one batch LogAppendTime with maxTimestamp `now_ms`, and re-sign it (both are inside the CRC)."""
    (attributes,) = _ATTRIBUTES.unpack_from(batch, position + ATTRIBUTES_OFFSET)
    _ATTRIBUTES.pack_into(batch, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _TIMESTAMP.pack_into(batch, position + _MAX_TIMESTAMP_OFFSET, now_ms)
    end = position + peek_size(batch, position)
    _CRC.pack_into(batch, position + CRC_OFFSET, compute_crc(memoryview(batch)[position:end]))


LOG_APPEND_TIME_REFUSED = "Producer should not set timestamp type to LogAppendTime"  # Kafka's LogValidator


def take_client_timestamp_type(batch: bytearray, position: int, topic_stamps: bool) -> None:
    """Rule: client-log-append-time for the client's batch at `position`, whose attributes say LogAppendTime: raise, or
    make it CreateTime and re-sign it. A batch whose length does not fit is left to the append's checks."""
    size = peek_size(batch, position)
    if size < HEADER_SIZE or position + size > len(batch):
        return
    with memoryview(batch) as view:
        header = validate_batch(view[position:position + size])  # CorruptRecordError: never re-signed
        if topic_stamps or header.max_timestamp == NO_TIMESTAMP:
            why = "the topic sets it (message.timestamp.type=LogAppendTime)" if topic_stamps else (
                "and the batch has no timestamp (maxTimestamp -1)")
            raise InvalidTimestampError(f"{LOG_APPEND_TIME_REFUSED}: {why}")
        (attributes,) = _ATTRIBUTES.unpack_from(batch, position + ATTRIBUTES_OFFSET)
        _ATTRIBUTES.pack_into(batch, position + ATTRIBUTES_OFFSET, attributes & ~TIMESTAMP_TYPE_MASK)
        _CRC.pack_into(batch, position + CRC_OFFSET, compute_crc(view[position:position + size]))

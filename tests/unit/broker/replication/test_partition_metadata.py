"""partition.metadata: Kafka's format, atomic replacement, and topic ids that differ per topic life."""

from __future__ import annotations

import base64

from sparklog.broker.replication import partition_metadata as pm


def test_topic_id_is_kafkas_22_char_base64_of_a_uuid_and_differs_per_czxid():
    first, second = pm.topic_id_from_czxid(0x1_0000_0011), pm.topic_id_from_czxid(0x1_0000_0013)
    assert len(first) == 22 and first != second
    assert base64.urlsafe_b64decode(first + "==")[-8:] == (0x1_0000_0011).to_bytes(8, "big")


def test_write_then_read_in_kafkas_format(tmp_path):
    pm.write(str(tmp_path), "AAAAAAAAAAAAAAAAAAAAEQ")
    assert (tmp_path / pm.FILE_NAME).read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAEQ\n"
    assert pm.read(str(tmp_path)) == "AAAAAAAAAAAAAAAAAAAAEQ"
    pm.write(str(tmp_path), "AAAAAAAAAAAAAAAAAAAAEw")  # replaced whole, no temp file left
    assert pm.read(str(tmp_path)) == "AAAAAAAAAAAAAAAAAAAAEw"
    assert sorted(p.name for p in tmp_path.iterdir()) == [pm.FILE_NAME]


def test_missing_or_unknown_version_reads_as_none(tmp_path):
    assert pm.read(str(tmp_path)) is None
    assert pm.read(str(tmp_path / "absent")) is None
    (tmp_path / pm.FILE_NAME).write_text("version: 7\ntopic_id: x\n")
    assert pm.read(str(tmp_path)) is None

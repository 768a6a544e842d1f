"""checkpoints.py: Kafka's one-entry OffsetCheckpointFile format, what an unreadable file reads as, and when
the recovery-point file is due (Rule: checkpoint-rewritten-when-behind)."""

from __future__ import annotations

import os

import pytest

from sparklog.storage.checkpoints import (CLEANER_OFFSET_FILE, RECOVERY_POINT_FILE, OffsetCheckpoints,
                                          RecoveryPointCheckpoint)
from sparklog.storage.files import OS_FILES


def checkpoints(tmp_path) -> OffsetCheckpoints:
    return OffsetCheckpoints(OS_FILES, str(tmp_path), "t", 3)


def test_a_written_offset_reads_back_in_kafkas_format(tmp_path):
    files = checkpoints(tmp_path)
    files.write(CLEANER_OFFSET_FILE, 42)
    assert (tmp_path / CLEANER_OFFSET_FILE).read_text() == "0\n1\nt 3 42\n"
    assert files.read(CLEANER_OFFSET_FILE, "unused") == 42


@pytest.mark.parametrize("text", ["", "0\n1\nt 3\n", "1\n1\nt 3 5\n", "0\n2\nt 3 5\n", "0\n1\nu 3 5\n",
                                  "0\n1\nt 4 5\n", "0\n1\nt 3 x\n", "\xff"])
def test_an_unreadable_file_reads_as_missing_and_says_what_happens_instead(tmp_path, caplog, text):
    (tmp_path / CLEANER_OFFSET_FILE).write_bytes(text.encode("latin-1"))
    assert checkpoints(tmp_path).read(CLEANER_OFFSET_FILE, "cleaning from the log start") is None
    assert "cleaning from the log start" in caplog.text


def test_a_missing_recovery_point_replays_everything(tmp_path):
    point = RecoveryPointCheckpoint(checkpoints(tmp_path), interval_ms=60_000)
    assert point.read() == 0 and point.checkpointed is None
    assert not os.path.exists(tmp_path / RECOVERY_POINT_FILE)


def test_the_recovery_point_file_is_due_at_once_when_behind_else_by_interval_or_on_close(tmp_path):
    point = RecoveryPointCheckpoint(checkpoints(tmp_path), interval_ms=60_000)
    point.write(100)
    now = point.checkpointed_at
    assert not point.due(100, now + 3600)  # nothing moved
    assert point.due(90, now)  # the file names offsets the log no longer has
    assert not point.due(120, now + 1)  # moved forward: waits for the interval
    assert point.due(120, now + 60) and point.due(120, now + 1, force=True)
    assert point.writes == 1 and RecoveryPointCheckpoint(checkpoints(tmp_path), 0).read() == 100

"""An offset gap inside a planned range is a range the broker fenced as damaged: failOnDataLoss sees it."""

import pytest

from sparklog.datasource.arrow import ColumnBuilder
from sparklog.datasource.errors import DataLossError, missing_range, report_data_loss
from sparklog.datasource.fetcher import _fetch_into

from unit.datasource.test_fetcher import FakeConsumer, batch


def test_a_fenced_gap_is_reported_and_the_rows_around_it_are_kept():
    gaps = []
    builder = ColumnBuilder("t", 0)
    consumer = FakeConsumer(batch(0, 5), batch(8, 5))  # offsets 5..7 were fenced by the broker
    assert _fetch_into(builder, consumer, 2, 13, lambda a, b: gaps.append((a, b))) == 13
    assert gaps == [(5, 8)]
    assert builder.build().column("offset").to_pylist() == [2, 3, 4, 8, 9, 10, 11, 12]


def test_fail_on_data_loss_fails_the_task_naming_the_fenced_range():
    consumer = FakeConsumer(batch(0, 5), batch(8, 5))
    with pytest.raises(DataLossError, match=r"Offsets \[5, 8\) of t-0 are missing"):
        _fetch_into(ColumnBuilder("t", 0), consumer, 0, 13,
                    lambda a, b: report_data_loss(True, missing_range("t", 0, a, b)))


def test_a_range_that_ends_at_a_batch_boundary_reports_no_gap_for_later_batches():
    """The range [0, 5) is complete after the first batch; a later batch past a gap is outside it."""
    gaps = []
    consumer = FakeConsumer(batch(0, 5), batch(8, 5))
    assert _fetch_into(ColumnBuilder("t", 0), consumer, 0, 5, lambda a, b: gaps.append((a, b))) == 5
    assert gaps == []


def test_the_offset_gaps_of_a_compacted_topic_are_not_data_loss():
    """The cleaner removes records inside batches and keeps every batch header (records/retain.py Rule 3), even
    of an emptied batch: the missing offsets are no fenced range, and the range still ends where planned."""
    from sparklog.records.batch import iter_batches
    from sparklog.records.retain import retain

    def cleaned(data, keep):
        (b,) = iter_batches(data)
        return retain(b, b.columns(), keep) or data

    chunks = (cleaned(batch(0, 5), [False, True, False, False, True]), cleaned(batch(5, 5, compression="gzip"),
              [False] * 5), cleaned(batch(10, 5, compression="zstd"), [True, False, False, True, False]))
    gaps = []
    builder = ColumnBuilder("t", 0)
    assert _fetch_into(builder, FakeConsumer(*chunks), 0, 14, lambda a, b: gaps.append((a, b))) == 14
    assert gaps == []
    assert builder.build().column("offset").to_pylist() == [1, 4, 10, 13]

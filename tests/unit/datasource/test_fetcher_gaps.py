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

"""`sparklog groups describe`'s rows and views from a GroupView: lag per partition and in total, owners, and
unknown values shown as "-" and left out of the total (never counted as zero)."""

from __future__ import annotations

from sparklog.cli.groups import GroupView, offset_rows, print_columns, print_members, print_offsets
from sparklog.client.kafka_groups import GroupMember

ALICE = GroupMember("alice-1", "i-1", "app", "/10.0.0.1", (("t", 0), ("t", 1)))


def group(**kw) -> GroupView:
    return GroupView(**{"name": "g", "kind": "kafka", "state": "Stable", "members": [ALICE],
                        "committed": {("t", 0): 5, ("t", 2): 7}, **kw})


def test_rows_cover_committed_and_owned_partitions_with_lag_where_both_ends_are_known():
    rows = offset_rows(group(), {("t", 0): (0, 9), ("t", 1): (0, 4)})  # t-2's leader did not answer
    assert [(r["partition"], r["current"], r["end"], r["lag"], r["consumer"]) for r in rows] == [
        (0, 5, 9, 4, "alice-1"), (1, None, 4, None, "alice-1"), (2, 7, None, None, None)]
    assert rows[0]["host"] == "/10.0.0.1" and rows[0]["client"] == "app"


def test_a_zookeeper_owner_without_a_member_entry_is_still_shown():
    rows = offset_rows(group(members=[], owners={("t", 3): "zk-consumer"}), {})
    assert [(r["partition"], r["consumer"]) for r in rows] == [(0, None), (2, None), (3, "zk-consumer")]


def test_offsets_view_totals_the_known_lag_and_names_what_it_could_not_count(capsys):
    view = group(members=[])
    print_offsets(view, offset_rows(view, {("t", 0): (0, 9), ("t", 2): (0, 7)}))
    out = capsys.readouterr().out
    assert out.startswith("Consumer group 'g' has no active members.")
    assert out.rstrip().endswith("TOTAL-LAG 4")
    view = group()
    print_offsets(view, offset_rows(view, {("t", 0): (0, 9)}))
    assert "TOTAL-LAG 4 (not counting t-1, t-2: no committed offset or no log end)" in capsys.readouterr().out


def test_members_view_shows_the_decoded_assignment(capsys):
    print_members(group())
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                              "ASSIGNMENT"]
    assert row.split() == ["g", "alice-1", "i-1", "/10.0.0.1", "app", "2", "t-0,t-1"]


def test_columns_align_under_their_headers_and_show_missing_values_as_a_dash(capsys):
    print_columns(("A", "LONG-HEADER", "C"), [("xxxx", None, ""), ("y", 1, 22)])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["A     LONG-HEADER  C", "xxxx  -            -", "y     1            22"]


def test_delete_offsets_topic_arguments_take_kafka_s_topic_and_topic_colon_partitions_forms():
    import pytest

    from sparklog.cli.groups import _topic_partitions

    assert _topic_partitions("t") == ("t", None)
    assert _topic_partitions("t:0,2") == ("t", [("t", 0), ("t", 2)])
    for bad in ("t:", ":0", "t:x", "t:0,,1"):
        with pytest.raises(ValueError):
            _topic_partitions(bad)


def test_by_duration_reads_java_s_iso_8601_durations_as_kafka_consumer_groups_does():
    import argparse

    import pytest

    from sparklog.cli.groups import _duration_ms

    assert _duration_ms("PT1H") == 3_600_000
    assert _duration_ms("P1DT2H3M4.5S") == ((24 + 2) * 60 + 3) * 60_000 + 4_500
    assert _duration_ms("pt30m") == 1_800_000 and _duration_ms("PT0.001S") == 1 and _duration_ms("P0D") == 0
    assert _duration_ms("-PT1M") == -60_000 and _duration_ms("PT-1M30S") == -30_000
    for bad in ("1h", "P", "PT", "P1Y", "P1W", "PT1.5H", "P1DT", "PT1S1H", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="ISO-8601 duration"):
            _duration_ms(bad)


def test_from_file_reads_kafka_s_reset_plans_with_or_without_the_group_column(tmp_path):
    import pytest

    from sparklog.cli.groups import PlanError, read_reset_plan

    plan = tmp_path / "plan.csv"
    plan.write_text("t,0,5\nt,1,0\n\nu.x-y,2,12\n")
    assert read_reset_plan(str(plan), "g") == {("t", 0): 5, ("t", 1): 0, ("u.x-y", 2): 12}
    plan.write_text("g,t,0,5\nother,t,0,9\ng,t,1,7\r\n")
    assert read_reset_plan(str(plan), "g") == {("t", 0): 5, ("t", 1): 7}
    for text, words in [("t,0\n", "line 1"), ("t,0,5\nt,x,5\n", "line 2"), ("t,0,-1\n", "line 1"),
                        ("t,0,5\nt,0,6\n", "t-0 twice"), ("other,t,0,5\n", "no reset plan for group 'g'"),
                        ("", "no reset plan for group 'g'"), ("t,0,5\ng,t,1,5\n", "line 2")]:
        plan.write_text(text)
        with pytest.raises(PlanError, match=words):
            read_reset_plan(str(plan), "g")
    with pytest.raises(PlanError, match="cannot read"):
        read_reset_plan(str(tmp_path / "missing.csv"), "g")


def test_by_duration_any_duration_s_parts_add_up_to_its_milliseconds():
    from hypothesis import given
    from hypothesis import strategies as st

    from sparklog.cli.groups import _duration_ms

    part = st.one_of(st.none(), st.integers(0, 10**6))

    @given(part, part, part, part, st.one_of(st.none(), st.integers(0, 999_999_999)), st.booleans())
    def check(days, hours, minutes, seconds, nanos, negative):
        if all(p is None for p in (days, hours, minutes, seconds)):
            return
        if nanos is not None and seconds is None:
            seconds = 0
        time_part = "".join(f"{v}{u}" for v, u in ((hours, "H"), (minutes, "M")) if v is not None)
        if seconds is not None:
            time_part += f"{seconds}.{nanos:09d}S" if nanos is not None else f"{seconds}S"
        text = ("-" if negative else "") + "P" + (f"{days}D" if days is not None else "") + (
            "T" + time_part if time_part else "")
        ns = ((((days or 0) * 24 + (hours or 0)) * 60 + (minutes or 0)) * 60 + (seconds or 0)) * 10**9 + (nanos or 0)
        assert _duration_ms(text) == (-ns if negative else ns) // 1_000_000

    check()

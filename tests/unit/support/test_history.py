"""The history checker itself, on hand-made good and bad histories: it must catch each kind of violation."""

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.history import History


def clean_history(n=5, topic="t", partition=0) -> History:
    h = History()
    records = [(offset, h.next_value()) for offset in range(n)]
    for offset, value in records:
        h.record_ack(topic, partition, offset, value)
    h.record_final_log(topic, partition, n, records)
    return h


def final(h: History, records, topic="t", partition=0, end=None) -> None:
    """The final log of one partition: `records` (offset, value), read to `end` (default: just past the last)."""
    h.record_final_log(topic, partition, max((o for o, _ in records), default=-1) + 1 if end is None else end,
                       list(records))


def test_a_clean_history_passes():
    report = clean_history().check()
    assert report.ok and report.acknowledged == 5 and report.read == 5 and report.found == 5


def test_acknowledged_after_counts_only_the_values_made_after_the_mark():
    h = History()
    early = [h.next_value() for _ in range(3)]
    mark = h.handed_out()
    late = [h.next_value("kp") for _ in range(2)]
    assert mark == 3 and h.handed_out() == 5
    h.record_ack("t", 0, 0, late[0])
    h.record_ack("t", 0, 1, early[2])  # acknowledged after the mark, but made before it
    h.record_ack("t", 0, 2, b"hand-made")
    assert h.acknowledged_after(mark) == 1
    h.record_ack("t", 0, 3, late[1])
    assert h.acknowledged_after(mark) == 2 and h.acknowledged_after(0) == 3


def test_a_lost_acknowledged_write_is_found():
    h = clean_history(3)
    h.record_ack("t", 0, 3, b"acked-but-gone")
    report = h.check()
    assert [p.kind for p in report.problems] == ["lost"]
    assert "offset 3" in str(report.problems[0])


def test_an_offset_read_with_two_values_is_divergent_and_the_one_not_in_the_final_log_vanished():
    h = History()
    h.record_ack("t", 0, 0, b"a")
    h.record_read("r1", "t", 0, 0, b"a")
    h.record_read("r2", "t", 0, 0, b"b")  # a new leader reused offset 0, then lost it again
    final(h, [(0, b"a")])
    report = h.check()
    assert [p.kind for p in report.of_kind("divergent")] == ["divergent"]
    assert report.of_kind("lost") == []  # the final log holds it there
    assert [(p.kind, p.detail.split(" saw ")[0]) for p in report.of_kind("vanished")] == [("vanished", "reader r2")]


def test_an_acknowledged_write_seen_live_then_gone_from_the_final_log_is_lost_and_vanished():
    """A live consumer read it at its offset; a later leader truncated it away. Having been seen once does not
    make it durable: the final log is what the cluster holds."""
    h = clean_history(3)
    h.record_ack("t", 0, 3, b"acked-then-truncated")
    h.record_read("live", "t", 0, 3, b"acked-then-truncated")
    report = h.check()
    assert [p.kind for p in report.problems] == ["lost", "vanished"], report
    assert report.found == 3 and not report.ok


def test_an_unacknowledged_value_seen_live_then_gone_vanished():
    h = clean_history(2)
    h.record_read("live", "t", 0, 2, b"uncommitted-tail")  # served above the high watermark, then truncated
    assert [p.kind for p in h.check().problems] == ["vanished"]


def test_a_final_read_that_stops_short_of_its_end_fails():
    h = History()
    records = [(offset, h.next_value()) for offset in range(6)]
    for offset, value in records:
        h.record_ack("t", 0, offset, value)
    final(h, records[:4], end=6)  # stopped at its deadline after 4 of 6
    report = h.check()
    assert [p.kind for p in report.problems] == ["short", "lost", "lost"], report
    assert "stopped at offset 4, its end is 6" in str(report)


def test_a_final_read_that_read_nothing_fails_even_where_nothing_acknowledged_is_past_its_end():
    h = History()
    h.record_ack("t", 0, 0, b"a")
    h.record_read("live", "t", 0, 0, b"a")
    final(h, [], end=1)
    assert [p.kind for p in h.check().problems] == ["short", "lost", "vanished"]


def test_a_partition_written_but_never_read_finally_is_unread():
    h = clean_history(2)
    h.record_ack("t", 1, 0, b"other-partition")
    report = h.check()
    assert [(p.kind, p.partition) for p in report.problems] == [("unread", 1), ("lost", 1)]


def test_nothing_acknowledged_is_not_ok():
    h = History()
    final(h, [], end=0)
    report = h.check()
    assert report.problems == () and not report.ok
    assert "nothing acknowledged proves nothing" in str(report)


def test_a_final_log_going_backwards_is_non_monotonic_and_recorded_once():
    h = History()
    h.record_ack("t", 0, 0, b"a")
    final(h, [(1, b"b"), (0, b"a")], end=2)
    assert [p.kind for p in h.check().problems] == ["non-monotonic"]
    with pytest.raises(ValueError, match="second final log"):
        final(h, [(0, b"a")])


def test_a_reused_offset_between_two_acks_is_divergent():
    h = History()
    h.record_ack("t", 1, 7, b"x")
    h.record_ack("t", 1, 7, b"y")
    final(h, [(7, b"y")], partition=1)
    report = h.check()
    assert {p.kind for p in report.problems} == {"divergent", "lost"}
    assert report.of_kind("lost")[0].partition == 1


def test_a_copy_after_the_acknowledged_offset_is_a_duplicate():
    h = History()
    h.record_ack("t", 0, 0, b"v-0")
    h.record_ack("t", 0, 1, b"v-1")
    final(h, [(0, b"v-0"), (1, b"v-1"), (2, b"v-0")])  # acknowledged at 0, yet stored again later: no retry does that
    report = h.check()
    assert [p.kind for p in report.problems] == ["duplicate"] and report.retries == ()
    assert "offsets [0, 2]" in report.problems[0].detail


def test_a_retried_produce_appended_twice_is_legal_without_idempotence_only():
    """acks=all without idempotence: the first attempt was appended but its answer lost; the retry was
    appended again and acknowledged. Kafka allows that copy before the acknowledged offset; an idempotent
    producer must never leave one."""
    for idempotent in (False, True):
        h = History(idempotent=idempotent)
        h.record_ack("t", 0, 0, b"a")
        h.record_ack("t", 0, 2, b"b")  # acknowledged at 2, its first attempt is at 1
        final(h, [(0, b"a"), (1, b"b"), (2, b"b")])
        report = h.check()
        assert report.ok is not idempotent
        assert [p.kind for p in report.problems] == (["duplicate"] if idempotent else [])
        assert [p.kind for p in report.retries] == ([] if idempotent else ["retry"])
        assert "offsets [1, 2]" in (report.problems or report.retries)[0].detail


def test_a_failed_delivery_stored_twice_is_a_retry_and_a_copy_after_the_ack_is_not():
    h = History()
    h.record_ack("t", 0, 2, b"c")
    # never-acked: the delivery report was an error, no ack recorded; c at 3 is after its acknowledgement: no
    # producer retry explains it
    final(h, [(0, b"never-acked"), (1, b"never-acked"), (2, b"c"), (3, b"c")])
    report = h.check()
    assert [(p.kind, p.detail.split(" at ")[0]) for p in report.retries] == [("retry", "b'never-acked'")]
    assert [p.kind for p in report.problems] == ["duplicate"] and "offsets [2, 3]" in report.problems[0].detail


def test_one_value_acknowledged_at_two_offsets_is_a_duplicate():
    h = History()
    for offset in (0, 1):
        h.record_ack("t", 0, offset, b"once")
    final(h, [(0, b"once"), (1, b"once")])
    assert [p.kind for p in h.check().problems] == ["duplicate"]


def test_a_non_idempotent_retry_is_reported_apart_and_is_no_problem():
    h = History()
    h.record_ack("t", 0, 1, b"other")
    h.record_ack("t", 0, 2, b"lost-answer")  # the retry, acknowledged; its first attempt at 0, its answer lost
    # never-acked: every attempt's answer lost, two copies, no ack
    final(h, [(0, b"lost-answer"), (1, b"other"), (2, b"lost-answer"), (3, b"never-acked"), (4, b"never-acked")])
    report = h.check()
    assert report.ok and [p.kind for p in report.retries] == ["retry", "retry"]
    assert "2 values written more than once by non-idempotent retries" in str(report)


@given(st.lists(st.integers(1, 3), min_size=1, max_size=30), st.data())
def test_a_retrying_producer_is_clean_and_an_ack_before_a_later_copy_is_not(attempts, data):
    """A model of acks=all without idempotence: write i is appended `attempts[i]` times, interleaved with the
    others, and only its last attempt is acknowledged. Always clean; moving one ack to an earlier copy is a
    duplicate."""
    appended = [i for i, n in enumerate(attempts) for _ in range(n)]
    order = data.draw(st.permutations(appended))
    h, last = History(), {}
    final(h, [(offset, b"w-%d" % i) for offset, i in enumerate(order)])
    for offset, i in enumerate(order):
        last[i] = offset
    retried = [i for i, n in enumerate(attempts) if n > 1]
    moved = data.draw(st.sampled_from(retried)) if retried else None
    for i, offset in last.items():
        if i == moved:
            offset = order.index(i)
        h.record_ack("t", 0, offset, b"w-%d" % i)
    report = h.check()
    assert len(report.retries) == len(retried) - (moved is not None)
    assert [p.kind for p in report.problems] == ([] if moved is None else ["duplicate"])


def test_a_reader_going_backwards_is_non_monotonic_unless_it_seeked():
    h = clean_history(3)
    h.record_read("c", "t", 0, 2, b"v-2")
    h.record_read("c", "t", 0, 1, b"v-1")
    assert [p.kind for p in h.check().problems] == ["non-monotonic"]
    ok = clean_history(3)
    ok.record_read("c", "t", 0, 2, b"v-2")
    ok.record_seek("c", "t", 0)
    ok.record_read("c", "t", 0, 1, b"v-1")
    assert ok.check().ok


def test_partitions_are_judged_separately():
    h = History()
    h.record_ack("t", 0, 0, b"a")
    h.record_ack("t", 1, 0, b"b")
    final(h, [(0, b"a")])
    final(h, [(0, b"b")], partition=1)
    assert h.check().ok


@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.data())
def test_dropping_any_read_of_an_acknowledged_write_is_reported_lost(partitions, data):
    h = History()
    next_offset = {}
    acked = []
    for p in partitions:
        offset = next_offset.get(p, 0)
        next_offset[p] = offset + 1
        value = h.next_value()
        h.record_ack("t", p, offset, value)
        acked.append((p, offset, value))
    dropped = data.draw(st.sampled_from(acked))
    for p in next_offset:  # a final log that never held the dropped write (its end: just past what it holds)
        final(h, [(offset, value) for q, offset, value in acked if q == p and (q, offset, value) != dropped],
              partition=p)
    report = h.check()
    assert [(pr.kind, pr.partition) for pr in report.problems] == [("lost", dropped[0])]


@given(st.integers(1, 30), st.data())
def test_a_log_cut_anywhere_after_writes_were_acknowledged_or_seen_is_caught(length, data):
    """A model of one partition: `length` records, some acknowledged, a live reader that read a prefix; then the
    final log is the whole log, or its tail is cut: truncated by the cluster (the end says so) or by a final
    read that stopped early (the end says more). Whole: ok. Cut: every acknowledged write past the cut is lost,
    every live read past it vanished, and a read stopped early is short."""
    h = History()
    records = [(offset, h.next_value()) for offset in range(length)]
    acked = data.draw(st.sets(st.integers(0, length - 1), min_size=1))
    seen_live = data.draw(st.integers(0, length))
    cut = data.draw(st.integers(0, length))
    stopped_early = data.draw(st.booleans())
    for offset in sorted(acked):
        h.record_ack("t", 0, offset, records[offset][1])
    for offset, value in records[:seen_live]:
        h.record_read("live", "t", 0, offset, value)
    final(h, records[:cut], end=length if stopped_early else cut)
    kinds = Counter(p.kind for p in h.check().problems)
    assert kinds == Counter({"short": int(stopped_early and cut < length),
                             "lost": sum(1 for offset in acked if offset >= cut),
                             "vanished": max(0, seen_live - cut)}) - Counter()


def test_read_by_counts_one_readers_reads():
    h = clean_history(3)
    h.record_read("live", "t", 0, 0, b"v-0")
    h.record_read("live", "t", 0, 1, b"v-1")
    h.record_read("other", "t", 0, 0, b"v-0")
    assert (h.read_by("live"), h.read_by("other"), h.read_by("nobody")) == (2, 1, 0)

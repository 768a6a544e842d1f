"""`sparklog produce`, `sparklog consume` and `sparklog groups` as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cli_cluster(request, zookeeper, tmp_path_factory):
    from support.cluster import Cluster

    cluster = Cluster(f"{zookeeper.connect_string}/cli-{uuid.uuid4().hex}", tmp_path_factory.mktemp("b"), brokers=1)
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster


def sparklog(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "sparklog.cli", *args], input=input, capture_output=True,
                          timeout=timeout, cwd=str(REPO), env=env)


def test_produce_consume_and_groups(cli_cluster):
    from sparklog.client.admin import AdminClient

    zk = cli_cluster.zk_connect
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    with AdminClient(cli_cluster.bootstrap) as admin:
        admin.create_topic(topic, 3)
    lines = b"".join(b"k%d:value %d\n" % (i % 5, i) for i in range(30))
    done = sparklog("produce", topic, "--zookeeper", zk, "--key-separator", ":", input=lines)
    assert done.returncode == 0, done.stderr.decode()

    plain = sparklog("consume", topic, "--bootstrap-server", cli_cluster.bootstrap, "--from-beginning",
                     "--max-messages", "30", "--print-key")
    assert plain.returncode == 0, plain.stderr.decode()
    got = sorted(plain.stdout.splitlines())
    assert got == sorted(b"k%d\tvalue %d" % (i % 5, i) for i in range(30))

    grouped = sparklog("consume", topic, "--zookeeper", zk, "--group", "cli-group", "--from-beginning",
                       "--max-messages", "30")
    assert grouped.returncode == 0, grouped.stderr.decode()
    assert sorted(grouped.stdout.splitlines()) == sorted(b"value %d" % i for i in range(30))
    assert b"Processed a total of 30 messages" in grouped.stderr

    listed = sparklog("groups", "--zookeeper", zk, "list")
    assert listed.returncode == 0 and b"cli-group" in listed.stdout

    described = sparklog("groups", "--zookeeper", zk, "describe", "cli-group")
    assert described.returncode == 0, described.stderr.decode()
    out = described.stdout.decode()
    assert "Consumer group 'cli-group' has no active members." in out and "TOTAL-LAG 0" in out
    cells = [line.split() for line in out.splitlines() if topic in line]
    assert [c[2] for c in cells] == ["0", "1", "2"]
    assert all(c[6:] == ["-", "-", "-"] for c in cells)  # nobody owns them now
    assert sum(int(c[3]) for c in cells) == 30 and all(c[5] == "0" for c in cells)  # committed all, lag 0

    reset = sparklog("groups", "--zookeeper", zk, "reset-offsets", "cli-group", "--to", "earliest")
    assert reset.returncode == 0, reset.stderr.decode()
    again = sparklog("consume", topic, "--zookeeper", zk, "--group", "cli-group", "--max-messages", "30")
    assert sorted(again.stdout.splitlines()) == sorted(b"value %d" % i for i in range(30))

    reset = sparklog("groups", "--zookeeper", zk, "reset-offsets", "cli-group", "--to", "25")
    assert reset.returncode == 0
    ends = [min(25, int(c[4])) for c in cells]  # clamped to each partition's log end, as Kafka's tool does
    assert reset.stdout.decode().split()[4:] == ["cli-group", topic, "0", str(ends[0]), "cli-group", topic, "1",
                                                 str(ends[1]), "cli-group", topic, "2", str(ends[2])]
    unknown = sparklog("groups", "--zookeeper", zk, "describe", "no-such-group")
    assert unknown.returncode == 1


def test_console_clients_take_kafka_s_topic_and_client_property_options(cli_cluster):
    """kafka-console-producer/consumer name the topic with --topic and client settings with --producer-property /
    --consumer-property: each was "unrecognized arguments"."""
    topic, bootstrap = f"kstyle-{uuid.uuid4().hex[:8]}", cli_cluster.bootstrap
    done = sparklog("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--producer-property", "acks=all",
                    input=b"one\ntwo\n")
    assert done.returncode == 0, done.stderr.decode()
    read = sparklog("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                    "--max-messages", "2", "--consumer-property", "fetch.max.wait.ms=100")
    assert read.returncode == 0 and read.stdout.splitlines() == [b"one", b"two"], read.stderr.decode()
    for command in (("consume", topic, "--topic", "other"), ("consume",), ("produce", "--topic", topic, topic + "x")):
        done = sparklog(*command, "--bootstrap-server", bootstrap)
        assert done.returncode == 2 and done.stderr.decode().splitlines()[-1].startswith(
            f"sparklog {command[0]}: error: "), done.stderr.decode()


def test_consume_with_bootstrap_and_group_is_a_kafka_group_member_that_commits(cli_cluster):
    """kafka-console-consumer --bootstrap-server B --group G (or --consumer-property group.id=G) joins a Kafka
    group through the group coordinator and commits what it printed: it was refused ("sparklog consume cannot
    join"). A second run of the group starts where the first stopped, and `groups describe` shows the group
    with lag 0."""
    topic, bootstrap, group = f"kgroup-{uuid.uuid4().hex[:8]}", cli_cluster.bootstrap, f"g-{uuid.uuid4().hex[:8]}"
    from sparklog.client.admin import AdminClient

    with AdminClient(bootstrap) as admin:
        admin.create_topic(topic, 3)
    lines = b"".join(b"first %d\n" % i for i in range(30))
    assert sparklog("produce", "--bootstrap-server", bootstrap, "--topic", topic, input=lines).returncode == 0
    first = sparklog("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                     "--from-beginning", "--max-messages", "30")
    assert first.returncode == 0, first.stderr.decode()
    assert sorted(first.stdout.splitlines()) == sorted(b"first %d" % i for i in range(30))
    described = sparklog("groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    assert described.returncode == 0, described.stderr.decode()
    rows = [line.split() for line in described.stdout.decode().splitlines() if topic in line]
    assert len(rows) == 3 and all(row[5] == "0" for row in rows), described.stdout.decode()  # LAG 0 everywhere
    assert sum(int(row[3]) for row in rows) == 30
    more = b"".join(b"second %d\n" % i for i in range(6))
    assert sparklog("produce", "--bootstrap-server", bootstrap, "--topic", topic, input=more).returncode == 0
    second = sparklog("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                      "--consumer-property", f"group.id={group}", "--max-messages", "6")
    assert second.returncode == 0, second.stderr.decode()
    assert sorted(second.stdout.splitlines()) == sorted(b"second %d" % i for i in range(6))  # from the commits


def test_console_clients_take_kafka_s_reader_and_formatter_properties(cli_cluster):
    """kafka-console-producer --property parse.key=true --property key.separator=: and kafka-console-consumer
    --property print.key=true|print.partition|print.offset|print.value|key.separator: each was refused as an
    "unknown client setting". The output is Kafka's DefaultMessageFormatter's: Partition:P, Offset:O, key, value."""
    topic, bootstrap = f"fmt-{uuid.uuid4().hex[:8]}", cli_cluster.bootstrap
    done = sparklog("produce", topic, "--bootstrap-server", bootstrap, "--partition", "0", "--property",
                    "parse.key=true", "--property", "key.separator=:", input=b"k1:v1\nk2:v2\n")
    assert done.returncode == 0, done.stderr.decode()
    base = ("consume", topic, "--bootstrap-server", bootstrap, "--from-beginning", "--max-messages", "2")
    read = sparklog(*base, "--property", "print.key=true", "--property", "key.separator=|",
                    "--property", "print.partition=true", "--property", "print.offset=true")
    assert read.returncode == 0, read.stderr.decode()
    assert read.stdout.splitlines() == [b"Partition:0|Offset:0|k1|v1", b"Partition:0|Offset:1|k2|v2"]
    keys = sparklog(*base, "--property", "print.key=true", "--property", "print.value=false")
    assert keys.returncode == 0 and keys.stdout.splitlines() == [b"k1", b"k2"], keys.stderr.decode()
    bad = sparklog(*base, "--property", "print.key=yes")
    assert bad.returncode != 0 and bad.stderr.decode().strip() == "error: --property print.key is true or false, not 'yes'"
    malformed = sparklog(*base, "--property", "print.key")  # no '=': one line, as every CLI error (cli.py Rule 2)
    lines = malformed.stderr.decode().strip().splitlines()
    assert malformed.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: --property: "), lines


def test_console_consumer_prints_kafka_s_timestamp_headers_and_separators(cli_cluster):
    """kafka-console-consumer's DefaultMessageFormatter properties print.timestamp, print.headers, line.separator,
    null.literal and a key.separator with spaces (kept as typed), and --formatter with its Kafka names: each was
    "unknown client setting" or an unrecognized argument, and ' | ' lost its spaces."""
    from sparklog.client import Producer

    topic, bootstrap = f"fmt2-{uuid.uuid4().hex[:8]}", cli_cluster.bootstrap
    with Producer(bootstrap_servers=bootstrap) as producer:
        producer.send(topic, b"v1", key=b"k1", partition=0, timestamp=1_700_000_000_000,
                      headers=[("h1", b"a"), ("h2", b"b")])
        producer.send(topic, None, key=None, partition=0, timestamp=1_700_000_000_001)
        producer.flush()
    read = sparklog("consume", topic, "--bootstrap-server", bootstrap, "--from-beginning", "--max-messages", "2",
                    "--formatter", "kafka.tools.DefaultMessageFormatter", "--property", "print.timestamp=true",
                    "--property", "print.headers=true", "--property", "print.key=true",
                    "--property", "key.separator= | ", "--property", "line.separator=;\n",
                    "--property", "null.literal=NULL")
    assert read.returncode == 0, read.stderr.decode()
    assert read.stdout.splitlines() == [b"CreateTime:1700000000000 | h1:a,h2:b | k1 | v1;",
                                        b"CreateTime:1700000000001 | NO_HEADERS | NULL | NULL;"]
    other = sparklog("consume", topic, "--bootstrap-server", bootstrap, "--formatter",
                     "kafka.tools.LoggingMessageFormatter")
    assert other.returncode == 2 and "DefaultMessageFormatter" in other.stderr.decode().splitlines()[-1]


def test_an_unknown_client_setting_says_where_the_settings_are_listed_and_help_shows_a_consumer_one():
    done = sparklog("consume", "t", "--bootstrap-server", "127.0.0.1:1", "--consumer-property", "foo.bar=1")
    assert done.returncode == 1 and done.stderr.decode().strip() == (
        "error: unknown client setting 'foo.bar'; see the client settings in docs/settings.md (Producer, "
        "Consumer), or sparklog.client.config")
    shown = sparklog("consume", "--help").stdout.decode()
    assert "fetch.max.wait.ms=100" in shown and "compression.type" not in shown


def test_topics_alter_places_new_partitions_by_kafka_s_replica_assignment(cli_cluster):
    """kafka-topics --alter --partitions N --replica-assignment LIST (every partition's replicas; the existing
    ones' entries are not changed): it was "unrecognized arguments"; a list that does not fit is one line."""
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close, connect

    topic, zk = f"alra-{uuid.uuid4().hex[:8]}", cli_cluster.zk_connect
    assert sparklog("topics", "--zookeeper", zk, "create", topic, "--partitions", "1").returncode == 0
    for assignment, words in [("1,1", "increasing the number of partitions by 2 but 1 assignments"),
                              ("1,1,7", "unknown broker"), ("1,1:1,1:1", "replication factor")]:
        done = sparklog("topics", "--zookeeper", zk, "alter", topic, "--partitions", "3",
                        "--replica-assignment", assignment)
        assert done.returncode == 1 and len(done.stderr.splitlines()) == 1 and words.encode() in done.stderr, (
            assignment, done.stderr.decode())
    done = sparklog("topics", "--zookeeper", zk, "alter", topic, "--partitions", "3", "--replica-assignment", "1,1,1")
    assert done.returncode == 0, done.stderr.decode()
    client = connect(zk)
    try:
        assert topics.get_topic(client, topic).partitions == {0: (1,), 1: (1,), 2: (1,)}
    finally:
        close(client)


def test_groups_describe_takes_kafka_s_offsets_and_all_groups_options(cli_cluster):
    """kafka-consumer-groups --describe --offsets (the default view, named) and --describe --all-groups (every
    group, one table each): both were "unrecognized arguments"."""
    bootstrap, topic, group, committer = group_at_5_in_a_log_from_4_to_10(cli_cluster, "alls")
    committer.close()
    offsets = sparklog("groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, "--offsets")
    assert offsets.returncode == 0, offsets.stderr.decode()
    rows = [line.split() for line in offsets.stdout.decode().splitlines() if line.startswith(group)]
    assert [r[:6] for r in rows] == [[group, topic, "0", "5", "10", "5"]]
    every = sparklog("groups", "--bootstrap-server", bootstrap, "describe", "--all-groups")
    assert every.returncode == 0, every.stderr.decode()
    assert [line.split()[:6] for line in every.stdout.decode().splitlines() if line.startswith(group)] == [
        [group, topic, "0", "5", "10", "5"]]
    both = sparklog("groups", "--bootstrap-server", bootstrap, "describe", group, "--all-groups")
    assert both.returncode == 2 and b"not both" in both.stderr


def test_consume_starts_at_kafka_s_offset_option_in_the_partition_named(cli_cluster):
    """kafka-console-consumer --partition P --offset N|earliest|latest: it was "unrecognized arguments: --offset";
    without one --partition, with --from-beginning or --group, or not a number, it is one usage line."""
    topic, bootstrap = f"offs-{uuid.uuid4().hex[:8]}", cli_cluster.bootstrap
    done = sparklog("produce", topic, "--bootstrap-server", bootstrap, "--partition", "0",
                    input=b"".join(b"m%d\n" % i for i in range(10)))
    assert done.returncode == 0, done.stderr.decode()
    base = ("consume", topic, "--bootstrap-server", bootstrap, "--partition", "0", "--max-messages")
    for offset, count, expected in [("7", "3", [b"m7", b"m8", b"m9"]), ("earliest", "2", [b"m0", b"m1"])]:
        read = sparklog(*base, count, "--offset", offset)
        assert read.returncode == 0 and read.stdout.splitlines() == expected, (offset, read.stderr.decode())
    latest = sparklog(*base, "1", "--offset", "latest", "--timeout-ms", "1000")
    assert latest.returncode == 0 and latest.stdout == b"", latest.stderr.decode()
    for bad in (("--offset", "3"), ("--offset", "-2", "--partition", "0"), ("--offset", "3", "--partition", "0",
                "--from-beginning"), ("--offset", "3", "--partition", "0", "--partition", "1")):
        done = sparklog("consume", topic, "--bootstrap-server", bootstrap, *bad)
        assert done.returncode == 2 and done.stderr.decode().splitlines()[-1].startswith(
            "sparklog consume: error: "), (bad, done.stderr.decode())


def test_topics_and_groups_take_kafka_tools_action_options(cli_cluster):
    """kafka-topics --create/--describe/--list --topic T and kafka-consumer-groups --list/--describe --group G,
    typed as Kafka's documentation shows them: "invalid choice: 'T'" or "unrecognized arguments: --list"."""
    topic, zk, bootstrap = f"ktool-{uuid.uuid4().hex[:8]}", cli_cluster.zk_connect, cli_cluster.bootstrap
    created = sparklog("topics", "--zookeeper", zk, "--create", "--topic", topic, "--partitions", "2")
    assert created.returncode == 0, created.stderr.decode()
    described = sparklog("topics", "--zookeeper", zk, "--describe", "--topic", topic)
    assert described.returncode == 0 and f"{topic}  partitions=2" in described.stdout.decode(), (
        described.stdout.decode(), described.stderr.decode())
    listed = sparklog("topics", "--zookeeper", zk, "--list")
    assert listed.returncode == 0 and topic in listed.stdout.decode().split()
    groups = sparklog("groups", "--bootstrap-server", bootstrap, "--list")
    assert groups.returncode == 0, groups.stderr.decode()
    missing = sparklog("groups", "--bootstrap-server", bootstrap, "--describe", "--group", "no-such-group")
    assert missing.returncode == 1 and b"'no-such-group' does not exist" in missing.stderr


# -- what cannot be reached is said in one line (issue 14, "Clear errors") -------------------------------------

REFUSED = "127.0.0.1:1"  # nothing listens on port 1
UNRESOLVED = "no-such-host.invalid:9092"  # .invalid never resolves (RFC 2606)


def _one_line_error(done: subprocess.CompletedProcess, *words: str) -> str:
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and all(w in errors[0] for w in words), err
    return err


@pytest.mark.parametrize("server, why", [(REFUSED, "connection refused"), (UNRESOLVED, "name not resolved")])
def test_produce_to_an_unreachable_broker_says_where_and_why(server, why):
    done = sparklog("produce", "events", "--bootstrap-server", server, "--property", "max.block.ms=2500",
                    input=b"hi\n", timeout=30)
    err = _one_line_error(done, server, why, "max.block.ms")
    assert f"cannot reach bootstrap server {server}: {why}" in err  # the warning while it retries


def test_consume_from_an_unreachable_broker_fails_instead_of_reading_nothing():
    listed = sparklog("consume", "events", "--bootstrap-server", REFUSED, "--property", "request.timeout.ms=2000",
                      timeout=30)
    _one_line_error(listed, REFUSED, "connection refused")
    idle = sparklog("consume", "events", "--bootstrap-server", REFUSED, "--partition", "0", "--timeout-ms", "1500",
                    timeout=30)
    _one_line_error(idle, REFUSED, "connection refused")
    assert b"Processed a total" not in idle.stderr  # not "0 messages": it never reached the broker


@pytest.mark.parametrize("command", [
    ("produce", "events", "--zookeeper", REFUSED),
    ("consume", "events", "--group", "g", "--zookeeper", REFUSED),
    ("consume", "events", "--zookeeper", REFUSED),
    ("topics", "--zookeeper", REFUSED, "list"),
    ("groups", "--zookeeper", REFUSED, "list"),
], ids=["produce", "consume-group", "consume", "topics", "groups"])
def test_an_unreachable_zookeeper_is_named_with_why(command):
    """Within --zookeeper-timeout-ms (zookeeper.connection.timeout.ms; 10 s by default), warned about once
    halfway through a timeout that short."""
    done = sparklog(*command, "--zookeeper-timeout-ms", "1000", input=b"hi\n", timeout=40)
    err = _one_line_error(done, "ZooKeeper", REFUSED, "connection refused", "within 1s")  # the wait it had
    assert f"cannot reach ZooKeeper at {REFUSED}: connection refused; retrying" in err


def test_a_broker_gives_up_on_an_unreachable_zookeeper_after_its_connection_timeout(tmp_path):
    done = sparklog("broker", "start", "--id", "1", "--port", "0", "--log-dir", str(tmp_path), "--zookeeper", REFUSED,
                    "--override", "zookeeper.connection.timeout.ms=1000", timeout=40)
    _one_line_error(done, f"could not reach ZooKeeper within 1s: {REFUSED}: connection refused")


def test_the_zookeeper_timeout_is_also_a_property_and_a_bad_one_is_refused_in_one_line():
    done = sparklog("produce", "events", "--zookeeper", REFUSED, "--property", "zookeeper.connection.timeout.ms=500",
                    input=b"hi\n", timeout=40)
    _one_line_error(done, "ZooKeeper", REFUSED, "connection refused", "within 0.5s")
    bad = sparklog("topics", "--zookeeper", REFUSED, "list", "--zookeeper-timeout-ms", "0", timeout=40)
    assert bad.returncode == 2 and bad.stderr.decode().strip().splitlines()[-1].endswith(
        "argument --zookeeper-timeout-ms: zookeeper.connection.timeout.ms: must be an integer (int) of at least 1, "
        "not 0")


@pytest.mark.parametrize("subcommand", [("list",), ("reset-offsets", "g", "--to", "0")], ids=lambda c: c[0])
def test_groups_with_an_unreachable_broker_fail_in_one_line_instead_of_an_empty_table(subcommand):
    done = sparklog("groups", "--bootstrap-server", REFUSED, "--timeout", "1500", *subcommand, timeout=30)
    _one_line_error(done, REFUSED, "connection refused")
    assert not done.stdout  # no table, not even a header


@pytest.mark.parametrize("command, words", [
    (("produce", "t", "--bootstrap-server", "127.0.0.1:notaport"), ("'127.0.0.1:notaport' is not host:port",)),
    (("groups", "--bootstrap-server", "x:y", "list"), ("'x:y' is not host:port",)),
    (("produce", "t", "--bootstrap-server", REFUSED, "--property", "nonsense=1"), ("unknown client setting 'nonsense'",)),
    (("produce", "t", "--bootstrap-server", REFUSED, "--property", "acks=7"), ("acks: must be one of",)),
    (("topics", "--zookeeper", "", "list"), ("ZooKeeper connect string ''", "no host")),
    (("topics", "--zookeeper", "/chroot", "list"), ("ZooKeeper connect string '/chroot'", "no host")),
    (("topics", "--zookeeper", "127.0.0.1:notaport", "list"), ("'127.0.0.1:notaport'", "port")),
    (("produce", "t", "--zookeeper", "127.0.0.1:99999"), ("'127.0.0.1:99999'", "port")),
    (("groups", "--zookeeper", "", "list"), ("ZooKeeper connect string ''",)),
    (("consume", "t", "--zookeeper", REFUSED, "--group", "bad/group"), ("illegal group 'bad/group'",)),
    (("consume", "t", "--bootstrap-server", REFUSED, "--group", "g1", "--consumer-property", "group.id=g2"),
     ("--group ('g1')", "group.id ('g2') differ")),
    (("consume", "t", "--bootstrap-server", REFUSED, "--group", "g1", "--partition", "0"),
     ("--partition is not allowed with a group",)),
], ids=["bootstrap-port", "groups-bootstrap", "unknown-property", "bad-property", "zk-empty", "zk-chroot-only",
        "zk-port", "zk-port-range", "groups-zk-empty", "group-name", "kafka-group-ids-differ",
        "kafka-group-partition"])
def test_bad_input_is_one_line_naming_it_before_anything_is_contacted(command, words):
    done = sparklog(*command, "--zookeeper-timeout-ms", "1000", input=b"hi\n", timeout=40)
    _one_line_error(done, *words)
    assert "cannot reach" not in done.stderr.decode()  # refused before any connection attempt


@pytest.mark.parametrize("command", [("zookeeper", "start", "--port", "99999"),
                                     ("broker", "start", "--id", "1", "--port", "99999", "--zookeeper", REFUSED)],
                         ids=["zookeeper", "broker"])
def test_a_port_out_of_range_is_a_usage_error_before_anything_starts(command):
    done = sparklog(*command, timeout=40)
    assert done.returncode == 2 and done.stderr.decode().strip().splitlines()[-1].endswith(
        "argument --port: must be a port in [0, 65535], not '99999'"), done.stderr.decode()


def test_bad_names_and_partitions_are_one_line(cli_cluster):
    bootstrap = cli_cluster.bootstrap
    bad_topic = sparklog("produce", "bad name", "--bootstrap-server", bootstrap, "--property", "max.block.ms=5000",
                         input=b"hi\n")
    _one_line_error(bad_topic, "INVALID_TOPIC_EXCEPTION", "bad name")
    negative = sparklog("produce", "events", "--bootstrap-server", bootstrap, "--partition", "-1", input=b"hi\n")
    _one_line_error(negative, "no partition -1")
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    missing = sparklog("produce", topic, "--bootstrap-server", bootstrap, "--partition", "9", input=b"hi\n")
    _one_line_error(missing, f"topic '{topic}' has 1 partitions, not partition 9")  # auto-created with one
    absent = sparklog("consume", topic, "--bootstrap-server", bootstrap, "--partition", "9", "--timeout-ms", "500")
    _one_line_error(absent, f"topic '{topic}' has 1 partitions, not partition 9")
    assert b"Processed a total" not in absent.stderr  # not "0 messages" of a partition that is not there
    none = sparklog("consume", topic, "--bootstrap-server", bootstrap, "--max-messages", "0", "--timeout-ms", "500")
    assert none.returncode == 0 and none.stdout == b"", none.stderr.decode()


def test_topics_with_a_bootstrap_server_works_through_the_admin_api(cli_cluster):
    """Kafka 3's `kafka-topics.sh --bootstrap-server` (issue 26): create, list, describe, alter, delete through
    the Admin API, in sparklog's and Kafka's forms; it was refused in one line naming --zookeeper. What writes a
    ZooKeeper request (elect-leaders) still says so in one line."""
    topic, bootstrap = f"admin-{uuid.uuid4().hex[:8]}", cli_cluster.bootstrap
    created = sparklog("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic, "--partitions", "2",
                       "--config", "retention.ms=600000")
    assert created.returncode == 0, created.stderr.decode()
    listed = sparklog("topics", "list", "--bootstrap-server", bootstrap)
    assert listed.returncode == 0 and topic in listed.stdout.decode().split(), listed.stderr.decode()
    sent = sparklog("produce", topic, "--bootstrap-server", bootstrap, "--partition", "0", input=b"a\nb\nc\n")
    assert sent.returncode == 0, sent.stderr.decode()
    described = sparklog("topics", "--bootstrap-server", bootstrap, "describe", topic)
    out = described.stdout.decode()
    assert described.returncode == 0 and f"{topic}  partitions=2  replication=1  config: retention.ms=600000" in out
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    assert [(r[0], r[1], r[4], r[6]) for r in rows] == [("0", "1", "ok", "3"), ("1", "1", "ok", "0")], out
    altered = sparklog("topics", "--bootstrap-server", bootstrap, "alter", topic, "--partitions", "3",
                       "--config", "segment.bytes=1048576", "--delete-config", "retention.ms")
    assert altered.returncode == 0, altered.stderr.decode()
    again = sparklog("topics", "--bootstrap-server", bootstrap, "describe", topic).stdout.decode()
    assert f"{topic}  partitions=3  replication=1  config: segment.bytes=1048576" in again, again
    refused = sparklog("topics", "--bootstrap-server", bootstrap, "elect-leaders")
    _one_line_error(refused, "--zookeeper")
    deleted = sparklog("topics", "--bootstrap-server", bootstrap, "delete", topic)
    assert deleted.returncode == 0, deleted.stderr.decode()


def test_a_bad_reset_target_is_one_line_before_anything_is_contacted():
    done = sparklog("groups", "reset-offsets", "g", "--to", "yesterday", "--zookeeper", REFUSED, timeout=30)
    assert done.returncode == 2 and done.stderr.decode().strip() == (
        "error: --to is earliest, latest or an offset (>= 0), not 'yesterday'")


def group_at_5_in_a_log_from_4_to_10(cli_cluster, prefix: str):
    """(bootstrap, topic, group, the confluent-kafka consumer that committed 5, left open): a one-partition
    topic of 10 records whose first 4 are deleted, and a group with no members."""
    from confluent_kafka import Consumer, TopicPartition

    from sparklog.client.admin import AdminClient
    from sparklog.client.producer import Producer

    bootstrap, topic, group = cli_cluster.bootstrap, f"{prefix}-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topic(topic, 1)
        with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
            for i in range(10):
                producer.send(topic, b"m%d" % i).get(30)
        admin.delete_records(topic, {0: 4})
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    return bootstrap, topic, group, committer


def test_a_reset_to_an_offset_outside_the_log_is_clamped_to_it_with_a_warning(cli_cluster):
    """kafka-consumer-groups clamps --to-offset into [log start, log end] and says so. `--to 99999999` was
    committed as given: the group's consumers then met OFFSET_OUT_OF_RANGE and auto.offset.reset (earliest:
    the whole log again); a target below the log start the same."""
    bootstrap, topic, group, committer = group_at_5_in_a_log_from_4_to_10(cli_cluster, "clamp")
    committer.close()
    base = ("groups", "--bootstrap-server", bootstrap, "reset-offsets", group, "--topic", topic, "--to")
    for target, expected, warning in [("99999999", "10", "higher than the log end"),
                                      ("2", "4", "lower than the log start"), ("6", "6", None)]:
        done = sparklog(*base, target)
        assert done.returncode == 0, done.stderr.decode()
        assert done.stdout.decode().split()[4:] == [group, topic, "0", expected]
        err = done.stderr.decode()
        assert (warning is None and err == "") or (
            warning in err and f"{topic}-0" in err and target in err and len(err.splitlines()) == 1), err


def test_reset_offsets_takes_kafka_tools_options_with_their_dry_run_default(cli_cluster):
    """kafka-consumer-groups' --to-earliest, --to-latest, --to-offset N, --to-datetime T (the log end when no
    record is that late) and --shift-by N (clamped to the log):
    `--to-earliest --execute` failed with "the following arguments are required: --to". As in Kafka's tool,
    these options only show the plan unless --execute is given; --dry-run shows it for --to too."""
    from confluent_kafka import TopicPartition

    bootstrap, topic, group, probe = group_at_5_in_a_log_from_4_to_10(cli_cluster, "kopt")

    def committed() -> int:
        return probe.committed([TopicPartition(topic, 0)], timeout=30)[0].offset

    base = ("groups", "--bootstrap-server", bootstrap, "reset-offsets", group, "--topic", topic)
    try:
        for options, shown, stored in [(("--to-earliest",), "4", 5), (("--to", "latest", "--dry-run"), "10", 5),
                                       (("--shift-by", "-3", "--execute"), "4", 4),  # 5 - 3, clamped up to 4
                                       (("--shift-by", "2", "--execute"), "6", 6),
                                       (("--to-offset", "8", "--execute"), "8", 8),
                                       (("--to-latest", "--execute"), "10", 10),
                                       (("--to-datetime", "2000-01-01T00:00:00.000Z", "--execute"), "4", 4),
                                       (("--to-datetime", "2999-01-01T00:00:00", "--execute"), "10", 10)]:
            done = sparklog(*base, *options)
            assert done.returncode == 0, (options, done.stderr.decode())
            assert done.stdout.decode().split()[4:] == [group, topic, "0", shown], options
            assert committed() == stored, options
            assert ("--execute" in options) != ("dry run" in done.stderr.decode()), (options, done.stderr)
        both = sparklog(*base, "--to-earliest", "--to-offset", "3")
        assert both.returncode == 2 and b"not allowed with" in both.stderr
        when = sparklog(*base, "--to-datetime", "yesterday")
        assert when.returncode == 2 and b"not a time like" in when.stderr
    finally:
        probe.close()


def test_reset_offsets_by_duration_from_a_file_and_exported(cli_cluster, tmp_path):
    """kafka-consumer-groups' --by-duration (ISO-8601, back from now: the first offset at or after that time,
    the log end when none is that late) and --from-file (CSV topic,partition,offset, or with the group first;
    offsets clamped to the log), whose plan --export prints: both were unrecognized arguments."""
    from confluent_kafka import TopicPartition

    bootstrap, topic, group, probe = group_at_5_in_a_log_from_4_to_10(cli_cluster, "dur")
    base = ("groups", "--bootstrap-server", bootstrap, "reset-offsets", group)
    try:
        for options, shown, stored in [(("--topic", topic, "--by-duration", "PT1H", "--execute"), "4", 4),
                                       (("--topic", topic, "--by-duration", "P0D", "--execute"), "10", 10)]:
            done = sparklog(*base, *options)
            assert done.returncode == 0, (options, done.stderr.decode())
            assert done.stdout.decode().split()[4:] == [group, topic, "0", shown], options
            assert probe.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == stored, options
        plan = tmp_path / "plan.csv"
        plan.write_text(f"{topic},0,6\n")
        exported = sparklog(*base, "--from-file", str(plan), "--export")
        assert exported.returncode == 0 and exported.stdout.decode() == f"{topic},0,6\n", exported.stderr.decode()
        plan.write_text(f"{group},{topic},0,99\n")
        done = sparklog(*base, "--from-file", str(plan), "--execute")
        assert done.returncode == 0 and done.stdout.decode().split()[4:] == [group, topic, "0", "10"]
        assert "higher than the log end" in done.stderr.decode()
        plan.write_text(f"{topic},0,7\n{topic},zero,1\n")
        bad = sparklog(*base, "--from-file", str(plan), "--execute")
        assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and b"line 2" in bad.stderr
        when = sparklog(*base, "--topic", topic, "--by-duration", "1h")
        assert when.returncode == 2 and b"ISO-8601 duration" in when.stderr
        assert probe.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == 10
    finally:
        probe.close()


def test_reset_offsets_scopes_are_kafka_s_topic_colon_partitions_and_all_topics(cli_cluster):
    """kafka-consumer-groups' scopes: `--topic T:1` resets partition 1 alone (it failed with
    "UNKNOWN_TOPIC_OR_PARTITION: topic 'T:1'"), `--all-topics` every partition the group committed (it was an
    unrecognized argument); the default without either stays every committed partition. --to-current (also
    unrecognized): the committed offset, the log end where there is none."""
    from confluent_kafka import Consumer, TopicPartition

    from sparklog.client.admin import AdminClient
    from sparklog.client.producer import Producer

    bootstrap, topic, group = cli_cluster.bootstrap, f"scope-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topic(topic, 2)
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(20):
            producer.send(topic, b"m%d" % i, partition=i % 2).get(30)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        probe.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)

        def committed() -> list[int]:
            return [tp.offset for tp in probe.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=30)]

        base = ("groups", "--bootstrap-server", bootstrap, "reset-offsets", group)
        current = sparklog(*base, "--topic", topic, "--to-current", "--execute")  # no commit in 1: its log end
        assert current.returncode == 0, current.stderr.decode()
        assert current.stdout.decode().split()[4:] == [group, topic, "0", "7", group, topic, "1", "10"]
        assert committed() == [7, 10]
        done = sparklog(*base, "--topic", f"{topic}:1", "--to-earliest", "--execute")
        assert done.returncode == 0, done.stderr.decode()
        assert done.stdout.decode().split()[4:] == [group, topic, "1", "0"]
        assert committed() == [7, 0]
        done = sparklog(*base, "--all-topics", "--to-latest", "--execute")
        assert done.returncode == 0, done.stderr.decode()
        assert done.stdout.decode().split()[4:] == [group, topic, "0", "10", group, topic, "1", "10"]
        assert committed() == [10, 10]
        both = sparklog(*base, "--all-topics", "--topic", topic, "--to-earliest")
        assert both.returncode == 2 and b"not allowed with" in both.stderr
        bad = sparklog(*base, "--topic", f"{topic}:x", "--to-earliest")
        assert bad.returncode == 2 and bad.stderr.decode().strip() == (
            f"error: --topic '{topic}:x': partitions are numbers, as in {topic}:0,1")
    finally:
        probe.close()


def produced_timestamp_type(bootstrap: str, topic: str, partition: int, tries: int = 1000,
                            within_s: float = 60.0) -> list[int]:
    """Produce one record at a time to `partition` and read it back (kafka-python) until the broker stamps
    it LogAppendTime (the alter reaches the open log through ZooKeeper); the timestamp types read, in order."""
    import time

    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap})
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, partition)])
    types: list[int] = []
    give_up = time.monotonic() + within_s
    try:
        for i in range(tries):
            if time.monotonic() > give_up:
                break
            producer.produce(topic, value=b"m%d" % i, partition=partition)
            assert producer.flush(30) == 0
            deadline = time.monotonic() + 30
            while len(types) <= i and time.monotonic() < deadline:
                types.extend(r.timestamp_type for rs in consumer.poll(timeout_ms=200).values() for r in rs)
            if types and types[-1] == 1:
                return types
            time.sleep(0.05)
        return types
    finally:
        consumer.close()


@pytest.mark.slow
def test_topics_alter_grows_and_reconfigures_the_open_logs_live(cli_cluster):
    from sparklog.client.admin import AdminClient

    zk = cli_cluster.zk_connect
    topic = f"alter-{uuid.uuid4().hex[:8]}"
    with AdminClient(cli_cluster.bootstrap) as admin:
        admin.create_topic(topic, 1, config={"retention.ms": "100000"})
        assert produced_timestamp_type(cli_cluster.bootstrap, topic, 0, tries=1) == [0]  # CreateTime: log open
        done = sparklog("topics", "alter", topic, "--zookeeper", zk, "--partitions", "3",
                        "--config", "message.timestamp.type=LogAppendTime", "--delete-config", "retention.ms")
        assert done.returncode == 0, done.stderr.decode()
        assert b"partitions 1 -> 3" in done.stdout and b"message.timestamp.type=LogAppendTime" in done.stdout
        configs = admin.describe_configs(topic)
        assert configs["message.timestamp.type"] == ("LogAppendTime", 1)  # DYNAMIC_TOPIC_CONFIG
        assert configs["retention.ms"] == ("604800000", 5)  # DEFAULT_CONFIG
        assert sorted(admin.wait_for_leaders(topic, partitions=3)) == [0, 1, 2]  # metadata may lag the growth
    types = produced_timestamp_type(cli_cluster.bootstrap, topic, 0)
    assert types[0] == 0 and types[-1] == 1  # the log opened before the alter now stamps LogAppendTime


@pytest.mark.slow
@pytest.mark.parametrize("args, code, message", [
    (["--config", "compression.type=brotli"], 1, b"compression.type: must be one of"),
    (["--config", "no.such.setting=1"], 1, b"unknown log setting 'no.such.setting'"),
    (["--delete-config", "segment.ms"], 1, b"cannot delete segment.ms: not set on the topic"),
    (["--partitions", "1"], 1, b"--partitions must be larger, not 1"),
    ([], 2, b"nothing to alter"),
])
def test_topics_alter_refuses_bad_input_in_one_line_and_changes_nothing(cli_cluster, args, code, message):
    from sparklog.client.admin import AdminClient

    topic = f"alter-bad-{uuid.uuid4().hex[:8]}"
    with AdminClient(cli_cluster.bootstrap) as admin:
        admin.create_topic(topic, 1, config={"retention.ms": "100000"})
        done = sparklog("topics", "alter", topic, "--zookeeper", cli_cluster.zk_connect, *args)
        assert done.returncode == code and message in done.stderr
        assert len(done.stderr.decode().strip().splitlines()) == 1 and b"Traceback" not in done.stderr
        assert admin.describe_configs(topic)["retention.ms"] == ("100000", 1)
        assert sorted(admin.describe([topic])[topic]) == [0]


@pytest.mark.slow
def test_admin_client_partitions_configs_records_and_cluster(cli_cluster):
    from sparklog.client.admin import AdminClient
    from sparklog.client.producer import Producer
    from sparklog.protocol.errors import InvalidConfigError, InvalidPartitionsError

    topic = f"admin-{uuid.uuid4().hex[:8]}"
    with AdminClient(cli_cluster.bootstrap) as admin:
        admin.create_topic(topic, 1, config={"flush.visibility": "appended"})
        admin.create_partitions(topic, 2)
        assert sorted(admin.describe([topic])[topic]) == [0, 1]
        with pytest.raises(InvalidPartitionsError, match="new count must be larger"):
            admin.create_partitions(topic, 2)
        admin.alter_configs(topic, {"cleanup.policy": "compact,delete"}, delete=("flush.visibility",))
        assert admin.describe_configs(topic)["cleanup.policy"] == ("compact,delete", 1)
        with pytest.raises(InvalidConfigError, match="min.insync.replicas"):
            admin.alter_configs(topic, {"min.insync.replicas": "0"})
        admin.alter_configs(topic, {"flush.visibility": "appended"})
        producer = Producer(bootstrap_servers=cli_cluster.bootstrap)
        try:
            for i in range(6):
                producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=0)  # compacted: keyed
            producer.flush()
        finally:
            producer.close()
        assert admin.delete_records(topic, {0: 4}) == {0: 4}
        assert admin.log_offsets(topic, {0: 1})[0] == (4, 6)
        cluster_id, controller, brokers = admin.describe_cluster()
        assert cluster_id and controller == 1 and list(brokers) == [1]
        broker_configs = admin.describe_configs("1", broker=True)
        assert broker_configs["log.message.timestamp.type"] == ("CreateTime", 5)


def test_groups_delete_with_only_a_bootstrap_server_asks_the_brokers_alone(cli_cluster):
    """No --zookeeper: a Kafka group is deleted by DeleteGroups, and ZooKeeper (not given) is never waited for;
    a group the brokers do not know is refused in one line that says ZooKeeper's groups were not checked."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    from sparklog.client.admin import AdminClient

    topic, group = f"del-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with AdminClient(cli_cluster.bootstrap) as admin:
        admin.create_topic(topic, 1)
    member_less = KafkaConsumer(bootstrap_servers=cli_cluster.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        member_less.assign([TopicPartition(topic, 0)])
        member_less.commit({TopicPartition(topic, 0): OffsetAndMetadata(3, "", -1)})
    finally:
        member_less.close()
    base = ("groups", "--bootstrap-server", cli_cluster.bootstrap, "--zookeeper-timeout-ms", "30000")
    started = time.monotonic()
    deleted = sparklog(*base, "delete", group)
    assert deleted.returncode == 0 and b"successful" in deleted.stdout, deleted.stderr.decode()
    again = sparklog(*base, "delete", group)
    _one_line_error(again, group, "does not exist", "ZooKeeper groups not checked")
    assert time.monotonic() - started < 20  # neither command waited for a ZooKeeper (30 s timeout)

"""`sparklog`'s reading of Kafka's tool forms: kafka-topics.sh and kafka-consumer-groups.sh name the action as an
option (--create, --describe, --reset-offsets ...) and the object with --topic / --group."""

from __future__ import annotations

import pytest

from sparklog.cli import build_parser, kafka_tool_form


@pytest.mark.parametrize("kafka, ours", [
    ("topics --zookeeper Z --list", "topics list --zookeeper Z"),
    ("topics --zookeeper Z --create --topic t --partitions 3 --config a=1",
     "topics create t --zookeeper Z --partitions 3 --config a=1"),
    ("topics --describe --topic=t --zookeeper Z", "topics describe t --zookeeper Z"),
    ("topics --zookeeper Z --describe", "topics describe --zookeeper Z"),
    ("topics --alter --topic t --partitions 4", "topics alter t --partitions 4"),
    ("topics --delete --topic t", "topics delete t"),
    ("groups --bootstrap-server B --list", "groups list --bootstrap-server B"),
    ("groups --bootstrap-server B --describe --group g --members", "groups describe g --bootstrap-server B --members"),
    ("groups --bootstrap-server B --reset-offsets --group g --topic t:0 --to-earliest --execute",
     "groups reset-offsets g --bootstrap-server B --topic t:0 --to-earliest --execute"),
    ("groups --bootstrap-server B --delete-offsets --group g --topic t", "groups delete-offsets g --bootstrap-server B --topic t"),
    ("groups --bootstrap-server B --delete --group=g", "groups delete g --bootstrap-server B"),
    ("groups --bootstrap-server B --describe --all-groups", "groups describe --bootstrap-server B --all-groups"),
    ("groups --bootstrap-server B --describe --group g --offsets", "groups describe g --bootstrap-server B --offsets"),
])
def test_kafka_s_action_options_become_the_subcommand_with_the_named_object(kafka, ours):
    assert kafka_tool_form(kafka.split()) == ours.split()
    build_parser().parse_args(ours.split())  # what it becomes is a command sparklog takes


@pytest.mark.parametrize("argv", [
    "topics describe t", "topics --zookeeper Z list", "groups describe g --members",
    "topics --create --describe --topic t",  # two actions: argparse says what is wrong
    "groups reset-offsets g --topic t --to-earliest", "produce --topic t", "topics describe --topic t",
    "topics --describe list",  # a subcommand is named: sparklog's form, left alone
    "groups --delete --all-groups",  # only --describe takes --all-groups here
])
def test_sparklog_s_own_forms_and_what_is_not_one_kafka_action_are_left_alone(argv):
    assert kafka_tool_form(argv.split()) == argv.split()

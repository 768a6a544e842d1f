"""`sparklog broker start`: what its help says about the advertised host is what the broker advertises."""

import argparse
import socket

from sparklog.broker.config import BrokerConfig
from sparklog.cli.broker import add_parser, broker_properties


def test_without_host_the_broker_advertises_the_canonical_host_name_its_help_names():
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["broker", "start", "--id", "1", "--port", "0", "--zookeeper", "127.0.0.1:1",
                              "--log-dir", "/nonexistent/sparklog-test"])
    config = BrokerConfig.from_properties(broker_properties(args))
    assert config.advertised[0].host == socket.getfqdn()  # Kafka: InetAddress.getLocalHost.getCanonicalHostName
    start = parser._subparsers._group_actions[0].choices["broker"]._subparsers._group_actions[0].choices["start"]
    host_help = next(a.help for a in start._actions if "--host" in a.option_strings)
    assert "canonical host name" in host_help and "machine's name)" not in host_help

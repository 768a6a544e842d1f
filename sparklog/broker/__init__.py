"""The broker: a Kafka-protocol server over partition logs, registered in ZooKeeper."""

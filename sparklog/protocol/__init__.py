"""The Kafka wire protocol, sans-IO: bytes in, typed requests and responses out."""

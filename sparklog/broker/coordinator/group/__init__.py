"""The Kafka group coordinator: groups as state machines, their APIs, and the committed offsets store."""

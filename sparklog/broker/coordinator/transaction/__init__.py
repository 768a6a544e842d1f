"""The transaction coordinator (Kafka's `TransactionCoordinator`, KIP-98): `__transaction_state`, the state
machine of each transactional id, the markers sent to partition leaders, and the handlers of its apis.

metadata.py is the state machine (sans-IO); config.py the settings; log.py the topic's partitions (load,
write-then-act); markers.py the WriteTxnMarkers channel; coordinator.py ties them; handlers.py the apis.
"""

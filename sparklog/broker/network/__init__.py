"""The network edge: the asyncio server, the per-connection dispatch to handlers, pipelining and queued bytes."""

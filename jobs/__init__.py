"""The pipeline built on sparklog (the paper, section 4): event generation, warehouse loads, a streaming
aggregation, the audit and a mirror. Each module is a runnable script (`python -m jobs.<name> --help`)
with a function the tests and `sparklog demo` call."""

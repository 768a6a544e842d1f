"""Storage: partition logs of RecordBatch v2 segment files (the paper's section 3.1)."""

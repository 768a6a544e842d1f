"""`python -m sparklog.cli ...`: the `sparklog` command (brokers are launched this way, and tests run it so)."""

import sys

from sparklog.cli import main

sys.exit(main())

"""Data loss, as Spark's Kafka source reports it: fail with `failOnDataLoss=true`, else warn and go on.

Rule 1: every message names the topic, the partition and the missing offset range.
Rule 2 (first line): the user reads the message of an error that is theirs to act on (a data loss, an
option: `options.SparklogOptionError`, a refused login: `AuthenticationFailed`, a DataFrame or a row the sink
cannot write: `writer.SparklogSchemaError`, `writer.SparklogRowError`) first, not under a traceback: raised in
a Spark Python worker, it asks pyspark to report it without the traceback (`show_message_first`). An error a
write task raises still comes under pyspark's "An exception was thrown from the Python worker:" line, so a
row's refusal is raised by the driver's commit instead (writer.py Rule 5).
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("sparklog.datasource")

FAIL_ADVICE = (
    "Some data may have been lost because they are not available in sparklog any more; either the data was "
    "aged out by retention or the topic may have been deleted before all the data in the topic was processed. "
    'If you don\'t want your streaming query to fail on such cases, set the source option "failOnDataLoss" '
    'to "false".'
)
WARN_ADVICE = (
    "Some data may have been lost because they are not available in sparklog any more; either the data was "
    "aged out by retention or the topic may have been deleted before all the data in the topic was processed. "
    'If you want your streaming query to fail on such cases, set the source option "failOnDataLoss" to "true".'
)


def show_message_first() -> None:
    """Rule 2: what `spark.sql.execution.pyspark.udf.hideTraceback.enabled` does, for this error: pyspark's
    `handle_worker_exception` reads SPARK_HIDE_TRACEBACK when it reports the error, and the worker exits after
    reporting it, so no other error of the process is affected."""
    os.environ["SPARK_HIDE_TRACEBACK"] = "1"


class DataLossError(RuntimeError):
    """Offsets the query must read are gone (retention, topic deleted or recreated) and failOnDataLoss=true."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        show_message_first()  # Rule 2


def report_data_loss(fail_on_data_loss: bool, message: str) -> None:
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {FAIL_ADVICE}")
    logger.warning("%s. %s", message, WARN_ADVICE)


def missing_range(topic: str, partition: int, start: int, end: int) -> str:
    return f"Offsets [{start}, {end}) of {topic}-{partition} are missing"


LOGIN_ADVICE = ("Check the options kafka.sasl.username and kafka.sasl.password (or kafka.sasl.jaas.config) and "
                "kafka.sasl.mechanism")


class AuthenticationFailed(PermissionError):
    """A broker refused the query's SASL login: a wrong password or user is said, never retried into a timeout
    or zero rows (Rule 2: the first line). The message is the client's, which names the user, never the password."""

    def __init__(self, refusal: BaseException) -> None:
        super().__init__(f"{refusal}. {LOGIN_ADVICE}")
        show_message_first()

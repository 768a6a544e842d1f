"""valueFormat=avro's options (datasource/avro.py) are read through their declarations (options.READ_OPTIONS),
as load() validated them: the value a task uses is the value load() checked."""

from sparklog.datasource.avro import reader_schema_id, value_format
from sparklog.datasource.options import parse_read_options

BASE = {"zookeeper.connect": "127.0.0.1:1", "subscribe": "t", "valueformat": "avro"}


class Lookups:
    """Records which subject and version `reader_schema_id` asks the registry for (the registry itself is
    tested against ZooKeeper in tests/unit/test_schemas.py)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int | None]] = []

    def latest(self, subject: str):
        self.asked.append((subject, None))
        return type("Version", (), {"schema_id": 11})

    def version(self, subject: str, version: int):
        self.asked.append((subject, version))
        return type("Version", (), {"schema_id": 12})


def test_the_subject_is_the_declared_value_trimmed_as_load_checked_it():
    opts = {**BASE, "subject": " activity-value "}
    parse_read_options(opts, streaming=True)  # load() accepts it
    lookups = Lookups()
    assert reader_schema_id(lookups, opts) == 11
    assert lookups.asked == [("activity-value", None)]


def test_an_empty_schema_id_is_absent_as_declared_and_the_subject_decides():
    opts = {**BASE, "subject": "s", "valueschemaid": "", "subjectversion": " 2 "}
    parse_read_options(opts, streaming=True)
    lookups = Lookups()
    assert reader_schema_id(lookups, opts) == 12
    assert lookups.asked == [("s", 2)]


def test_the_value_format_is_the_declared_choice_whatever_its_case_and_spaces():
    assert value_format({**BASE, "subject": "s", "valueformat": " AVRO "}) == "avro"
    assert value_format({"subscribe": "t"}) == "binary"

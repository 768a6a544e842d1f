import pytest

from sparklog.storage import InvalidTopicName, validate_topic
from sparklog.storage.topic_names import parse_partition_dir, partition_dir_name


@pytest.mark.parametrize("name", ["a", "A-b_c.d", "x" * 249, "..a", "-"])
def test_legal_names(name):
    assert validate_topic(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "é", "a:b"])
def test_illegal_names(name):
    with pytest.raises(InvalidTopicName):
        validate_topic(name)


def test_partition_dirs():
    assert parse_partition_dir("my-topic-7") == ("my-topic", 7)
    assert partition_dir_name("t", 3) == "t-3"
    for bad in ("t", "t-", "t-007", "t--", "-3", "t-1x"):
        with pytest.raises(InvalidTopicName):
            parse_partition_dir(bad)
    with pytest.raises(InvalidTopicName):
        partition_dir_name("t", -1)

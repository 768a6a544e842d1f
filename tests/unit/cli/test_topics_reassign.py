"""`sparklog topics reassign --throttle`: a rate that is not a positive number of bytes per second is refused in
one line before anything is contacted."""

from __future__ import annotations

import pytest

from sparklog.cli import main


@pytest.mark.parametrize("rate", ["0", "-5", "fast", "1.5"])
def test_a_bad_throttle_is_refused_in_one_line(tmp_path, capsys, rate):
    plan = tmp_path / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]}]}')
    with pytest.raises(SystemExit) as info:
        main(["topics", "--zookeeper", "127.0.0.1:1", "reassign", "--plan", str(plan), "--throttle", rate])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--throttle: must be a positive number of bytes per second" in err[-1] and rate in err[-1]

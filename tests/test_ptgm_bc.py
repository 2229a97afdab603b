"""benchmarks/studies/ptgm_bc.py's command line: the seeds it runs and the data-size arms."""

from __future__ import annotations

import pytest


def test_seeds_follow_the_harness_and_zero_is_refused(load_benchmark, capsys):
    bc = load_benchmark("ptgm_bc")
    with pytest.raises(SystemExit) as stop:   # "--seeds 0" once ran no seed and wrote a report of NaNs
        bc.main(["--seeds", "0", "--report-only"])
    assert stop.value.code == 2 and "names no seed" in capsys.readouterr().err
    assert bc.harness().parse_seeds("2,") == [2]
    fractions = {arm: bc.ARMS[arm]["fraction"] for arm in ("bc-tenth-data", "bc-third-data", "bc-half-data", "bc-frozen")}
    assert fractions == {"bc-tenth-data": 0.1, "bc-third-data": 1 / 3, "bc-half-data": 0.5, "bc-frozen": 1.0}

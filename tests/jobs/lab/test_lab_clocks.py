"""Every rank's events on rank 0's clock (jobs/lab/components/clocks.py): ranks on one host
read it directly; a rank on another host (played here by a plugin, on a host where the
true offset is known to be 0) measures its offset by exchanging timestamps, within the
error it reports, and the run's collectives then end on every rank after they began on
the last - as the run page draws them."""

from __future__ import annotations

from lab_helpers import PLUGINS, TINY, shared

from app.journal.views import rank_events
from base.contract import EVENTS_FILE


def test_a_rank_on_another_host_meets_rank_0s_clock_within_its_error(tmp_path_factory):
    params = {**TINY, "world_size": 2, "strategies": ["dp_naive"]}
    run = shared(tmp_path_factory, "data_parallel", params,
                 env={"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "another_host.py")})
    assert run.rc == 0, run.stderr[-3000:]
    clock = run.result["clock"]
    assert clock["one_clock"] == [0]
    measured = clock["exchanged"]["1"]
    assert 0 < measured["error_s"] and abs(measured["offset_s"]) <= measured["error_s"]
    assert run.result["environment"]["clock"] == (
        f"rank 0's: rank 0 read it; rank 1 within {measured['error_s'] * 1e3:.3g} ms "
        "(timestamps exchanged)")
    found = rank_events.load(run.out / EVENTS_FILE)
    calls = rank_events.match_collectives(found.events)
    assert calls and all(min(e.t1 for e in c) >= max(e.t0 for e in c) for c in calls)

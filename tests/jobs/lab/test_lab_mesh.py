"""The mesh experiment (DP x TP, DP x PP, DP x PP x TP): what the matrix does not check -
the grid's rank order and groups, the link each dimension crosses, the bytes per
dimension, the rules, and the 3-D strategy at world 8 (2 x 2 x 2) through the gate, with
every dimension's counted bytes equal to its prediction."""

from __future__ import annotations

import pytest
from lab_helpers import NCCL_LIKE, TINY, launch, shared

from jobs.lab.catalogue import registry
from jobs.lab.predict import mesh as mesh_model
from jobs.lab.strategies.correctness import GATE_STEPS

CUBE = {"dp": 2, "pp": 2, "tp": 2}


def test_rank_order_is_tp_innermost_then_pp_then_dp():
    assert [mesh_model.coords(r, CUBE) for r in (0, 1, 2, 5, 7)] == [
        {"dp": 0, "pp": 0, "tp": 0}, {"dp": 0, "pp": 0, "tp": 1}, {"dp": 0, "pp": 1, "tp": 0},
        {"dp": 1, "pp": 0, "tp": 1}, {"dp": 1, "pp": 1, "tp": 1}]
    assert all(mesh_model.rank_of(*mesh_model.coords(r, CUBE).values(), CUBE) == r
               for r in range(8))


def test_the_groups_of_each_dimension():
    assert mesh_model.groups("tp", CUBE) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert mesh_model.groups("pp", CUBE) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert mesh_model.groups("dp", CUBE) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert mesh_model.group_of(5, "tp", CUBE) == [4, 5]  # rank 5's tensor-parallel peer: 4
    assert mesh_model.degrees("dp_tp", 4, 2, 2) == {"dp": 2, "pp": 1, "tp": 2}
    assert mesh_model.degrees("dp_pp", 4, 2, 2) == {"dp": 2, "pp": 2, "tp": 1}
    assert mesh_model.degrees("dp_pp_tp", 8, 2, 2) == CUBE


def _cube_bytes(rank: int, rpn: int) -> dict:
    per = mesh_model.dim_bytes("dp_pp_tp", rank, CUBE, L=2, B=8, s=16, h=32, e=4, m=2,
                               numels=[1000, 24], cap_elems=10**6)
    return mesh_model.breakdown(per, rank, CUBE, rpn)


def test_bytes_per_dimension_and_link_kind():
    b = _cube_bytes(0, 2)
    # tp: 4 all-reduces of (B/d)*s*h*e per block of the stage (1 block), per micro-batch
    assert b["tp"] == {"bytes": 4 * 1 * 4 * 16 * 32 * 4, "calls": 4 * 2, "peers": [0, 1],
                       "link": "intra"}
    # pp: the first stage sends m activations and receives m gradients of (B/(d m)) s h e
    assert b["pp"]["bytes"] == 2 * 2 * 2 * 16 * 32 * 4 and b["pp"]["link"] == "inter"
    assert b["dp"] == {"bytes": 1024 * 4, "calls": 1, "peers": [0, 4], "link": "inter"}
    # four ranks a node: the pipeline's neighbours share it, data parallelism crosses
    wide = _cube_bytes(0, 4)
    assert (wide["tp"]["link"], wide["pp"]["link"], wide["dp"]["link"]) == \
        ("intra", "intra", "inter")
    t = mesh_model.totals([_cube_bytes(r, 2) for r in range(8)])
    assert t["dominant"] == "tp" and t["bytes_per_link"]["intra"] == t["bytes_per_dim"]["tp"]
    assert mesh_model.dominant_line(t).startswith("tp dominates")
    merged = mesh_model.merged(mesh_model.dim_bytes(
        "dp_pp_tp", 0, CUBE, L=2, B=8, s=16, h=32, e=4, m=2, numels=[1000, 24],
        cap_elems=10**6))
    assert merged["all_reduce"] == {"bytes": b["tp"]["bytes"] + b["dp"]["bytes"], "count": 9}


def test_the_rules():
    ok = {"world_size": 8, "strategies": ["dp_pp_tp"], "layers": 2}
    assert registry.validate("mesh", ok)["tp"] == 2
    assert registry.validate("mesh", {"world_size": 2})["strategies"] == ["dp_tp", "torch_dp_tp"]
    for bad, param in (({"world_size": 6, "strategies": ["dp_pp_tp"]}, "world_size"),
                       ({**ok, "micro_batches": 1}, "micro_batches"),
                       ({**ok, "layers": 1}, "layers"),
                       ({"world_size": 4, "tp": 4, "heads": 2, "hidden": 64}, "heads"),
                       ({"world_size": 8, "batch_size": 6, "strategies": ["dp_pp"], "pp": 2},
                        "batch_size")):
        with pytest.raises(registry.ParamError) as err:
            registry.validate("mesh", bad)
        assert err.value.param == param


def test_three_dimensions_at_world_eight_pass_the_gate_with_bytes_exact_per_dimension(
        tmp_path):
    params = {**TINY, "steps": 1, "warmup": 0, "world_size": 8, "tp": 2, "pp": 2,
              "micro_batches": 2, "ranks_per_node": 2, "strategies": ["dp_pp_tp"]}
    run = launch("mesh", params, tmp_path, timeout=300)
    assert run.rc == 0, (run.stderr[-3000:], run.stdout[-2000:])
    s = run.strategy("dp_pp_tp")
    c = s["correctness"]
    assert c["passed"], c["reason"]
    assert c["steps_checked"] == GATE_STEPS and c["coverage_exact"] and c["max_rel_error"] < 1e-4
    assert c["replicas_bit_identical"] and c["schedule"]["order_ok"]
    assert s["comm"]["all_exact"], s["comm"]["bytes_vs_predicted"]
    assert len(s["extra"]) == 8
    for e in s["extra"]:
        mesh = e["mesh"]
        assert (mesh["dp"], mesh["pp"], mesh["tp"]) == (2, 2, 2)
        assert set(mesh["dims"]) == {"dp", "pp", "tp"}
        for dim, row in mesh["dims"].items():
            assert row["measured_bytes"] == row["bytes"] > 0, (e["rank"], dim, row)
        assert mesh["dims"]["tp"]["link"] == "intra" and mesh["dims"]["dp"]["link"] == "inter"
    for m in s["memory"]:
        assert 0.9 <= m["peak"]["ratio"] <= 1.1, (m["rank"], m["peak"])
    # each dimension priced with its own group's link: tp's and dp's 2-rank all-reduces
    # calibrated on 2-rank groups, not the 8-rank world's
    links = run.result["calibration"]["links"]
    assert "all_reduce@2" in links and "all_reduce" not in links
    assert s["prediction"]["terms_s"]["tp_comm"] > 0


def test_the_card_names_the_dimension_whose_traffic_dominates():
    from app.journal.views import card_training
    dims = [{"rank": r, "mesh": {"dims": {"tp": {"bytes": 100, "link": "intra"},
                                          "dp": {"bytes": 300, "link": "inter"}}}}
            for r in range(2)]
    line = card_training.mesh([{"strategy": "dp_tp", "extra": dims},
                               {"strategy": "odd", "extra": [{"mesh": {"dims": "x"}}, 3]}])
    assert line.count("<li>") == 1
    assert "<strong>dp</strong> dominates" in line and "75%" in line


@pytest.mark.parametrize("precision", ["fp32_sgd", "bf16_adamw"])
def test_torch_dp_pp_passes_the_gate_beside_dp_pp_with_the_same_pipeline_bytes(
        tmp_path_factory, precision):
    """DeviceMesh ("dp", "pp") + DDP per stage + Schedule1F1B at world 4 (2 x 2), under a
    backend that fails a CPU tensor the way nccl does: the gate, bytes exact, memory within
    10%, and per rank the same pp and dp bytes as the hand-written dp_pp. In fp32 this is
    test_lab_matrix's mesh-4 run, dp_tp and torch_dp_tp beside."""
    params = {**TINY, "steps": 1, "warmup": 0, "world_size": 4, "pp": 2, "micro_batches": 2,
              "ranks_per_node": 2, "precision": precision,
              "strategies": ["dp_pp", "torch_dp_pp"]}
    if precision == "fp32_sgd":
        params["strategies"] = ["dp_tp", "torch_dp_tp", "dp_pp", "torch_dp_pp"]
    run = shared(tmp_path_factory, "mesh", params, env=NCCL_LIKE, timeout=300)
    assert run.rc == 0, (run.stderr[-3000:], run.stdout[-2000:])
    dims = {}
    for name in ("dp_pp", "torch_dp_pp"):
        s = run.strategy(name)
        c = s["correctness"]
        assert c["passed"], (name, c["reason"])
        assert c["coverage_exact"] and c["replicas_bit_identical"]
        assert s["comm"]["all_exact"], (name, s["comm"]["bytes_vs_predicted"])
        for m in s["memory"]:
            assert 0.9 <= m["peak"]["ratio"] <= 1.1, (name, m["rank"], m["peak"])
        dims[name] = {e["rank"]: {d: row["bytes"] for d, row in e["mesh"]["dims"].items()}
                      for e in s["extra"]}
    assert dims["dp_pp"] == dims["torch_dp_pp"]
    assert all(set(b) == {"dp", "pp"} and b["pp"] > 0 for b in dims["dp_pp"].values())


def test_torch_dp_pp_has_dp_pp_s_rules():
    ok = {"world_size": 4, "strategies": ["torch_dp_pp"], "pp": 2}
    assert registry.validate("mesh", ok)["strategies"] == ["torch_dp_pp"]
    assert mesh_model.degrees("torch_dp_pp", 4, 2, 2) == {"dp": 2, "pp": 2, "tp": 1}
    for bad, param in (({**ok, "world_size": 3}, "world_size"),
                       ({**ok, "micro_batches": 1}, "micro_batches"),
                       ({**ok, "layers": 1}, "layers"),
                       ({**ok, "batch_size": 6}, "batch_size")):
        with pytest.raises(registry.ParamError) as err:
            registry.validate("mesh", bad)
        assert err.value.param == param

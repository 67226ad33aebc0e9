"""The catalogue and its validation: plain data, no torch, errors that name the parameter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.lab.catalogue import registry
from jobs.lab.catalogue.registry import ParamError, validate


def test_registry_imports_without_torch():
    code = ("import sys, jobs.lab.catalogue.registry, jobs.lab.predict.cost, "
            "jobs.lab.predict.memory, jobs.lab; "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_catalogue_is_json_and_complete():
    cat = registry.catalogue()
    assert json.loads(json.dumps(cat)) == cat
    names = {e["name"] for e in cat}
    assert names == {"collectives", "gemm_roofline", "data_parallel", "pipeline",
                     "tensor_parallel", "zero", "gpt_mfu", "mesh", "recompute", "sequence",
                     "experts"}
    for exp in cat:
        assert exp["description"] and exp["title"] and exp["result"]
        for pname, spec in exp["params"].items():
            assert pname == pname.lower() and " " not in pname
            assert spec["type"] in {"int", "float", "str", "bool", "str_list"}
            assert spec["description"]
            assert "default" in spec


@pytest.mark.parametrize("name", sorted(registry.EXPERIMENTS))
def test_defaults_validate(name):
    resolved = validate(name, {})
    assert resolved == registry.defaults(name)


def test_shared_names_mean_the_same():
    # world_size, steps, hidden ... have one type wherever they appear
    seen: dict[str, str] = {}
    for exp in registry.catalogue():
        for pname, spec in exp["params"].items():
            assert seen.setdefault(pname, spec["type"]) == spec["type"], pname


@pytest.mark.parametrize("experiment,params,param", [
    ("data_parallel", {"world_size": 9}, "world_size"),
    ("data_parallel", {"world_size": 0}, "world_size"),
    ("pipeline", {"world_size": 1}, "world_size"),
    ("pipeline", {"world_size": 4, "micro_batches": 2, "batch_size": 8}, "micro_batches"),
    ("pipeline", {"world_size": 4, "layers": 2}, "layers"),
    ("pipeline", {"micro_batches": 3, "batch_size": 8}, "micro_batches"),
    ("tensor_parallel", {"world_size": 3, "heads": 4}, "heads"),
    ("tensor_parallel", {"hidden": 66, "heads": 4}, "heads"),
    ("data_parallel", {"hidden": 100000}, "hidden"),
    ("data_parallel", {"steps": 0}, "steps"),
    ("data_parallel", {"steps": "5"}, "steps"),
    ("data_parallel", {"steps": True}, "steps"),
    ("data_parallel", {"bucket_cap_mb": "big"}, "bucket_cap_mb"),
    ("data_parallel", {"strategies": ["ddp", "nope"]}, "strategies"),
    ("data_parallel", {"strategies": []}, "strategies"),
    ("data_parallel", {"strategies": ["ddp", "ddp"]}, "strategies"),
    ("data_parallel", {"batch_size": 6, "world_size": 4}, "batch_size"),
    ("data_parallel", {"typo_param": 1}, "typo_param"),
    ("data_parallel", {"model": "resnet"}, "model"),
    ("zero", {"precision": "fp16_adam"}, "precision"),
    ("gpt_mfu", {"precision": "bf16_adamw"}, "precision"),  # a training recipe only
    ("zero", {"world_size": 3, "batch_size": 8}, "batch_size"),
    ("collectives", {"min_bytes": 4096, "max_bytes": 1024}, "min_bytes"),
    ("collectives", {"world_size": 1}, "world_size"),
    ("gpt_mfu", {"world_size": 2}, "world_size"),
    ("nope", {}, "experiment"),
])
def test_invalid_params_name_the_parameter(experiment, params, param):
    with pytest.raises(ParamError) as err:
        validate(experiment, params)
    assert err.value.param == param
    assert err.value.message
    assert param in str(err.value)


def test_every_training_experiment_offers_both_recipes_fp32_sgd_by_default():
    for name in ("data_parallel", "pipeline", "tensor_parallel", "zero"):
        spec = registry.EXPERIMENTS[name]["params"]["precision"]
        assert spec["default"] == "fp32_sgd" and spec["choices"] == ["fp32_sgd", "bf16_adamw"]
        assert validate(name, {"precision": "bf16_adamw"})["precision"] == "bf16_adamw"


def test_one_f_one_b_rule_only_applies_to_one_f_one_b():
    ok = validate("pipeline", {"world_size": 4, "micro_batches": 2, "batch_size": 8,
                               "strategies": ["naive_mp", "gpipe"]})
    assert ok["micro_batches"] == 2


def test_str_list_accepts_comma_string_and_float_integers():
    p = validate("data_parallel", {"strategies": "ddp, dp_naive", "steps": 3.0})
    assert p["strategies"] == ["ddp", "dp_naive"] and p["steps"] == 3


@settings(max_examples=200, deadline=None)
@given(hidden=st.integers(-10, 20000), heads=st.integers(-2, 300),
       world=st.integers(-1, 10), layers=st.integers(-1, 200))
def test_validate_either_resolves_or_names_a_known_param(hidden, heads, world, layers):
    params = {"hidden": hidden, "heads": heads, "world_size": world, "layers": layers}
    try:
        out = validate("tensor_parallel", params)
    except ParamError as exc:
        assert exc.param in registry.EXPERIMENTS["tensor_parallel"]["params"]
    else:
        assert out["hidden"] % out["heads"] == 0 and out["heads"] % out["world_size"] == 0

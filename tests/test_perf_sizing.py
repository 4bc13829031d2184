from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.resolve.perf.sizing import (
    PerfSizing,
    config_path_for,
    detect_kind,
    load_perf_config,
    server_names,
    size_config,
)
from trtllm_script_builder.resolve.perf.testid import parse_perf_test_id

# /work/<clone>/tests/this_file.py -> /work/shared/data/trtllm (a copy of the repo's layout)
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "trtllm"
AGG = DATA / "tests" / "scripts" / "perf-sanity" / "aggregated"
DISAGG = DATA / "tests" / "scripts" / "perf-sanity" / "disaggregated"
TEST_DB = DATA / "tests" / "integration" / "test_lists" / "test-db"

UCX = "gb200_deepseek-r1-fp4_1k1k_con2048_ctx2_dep4_gen1_dep16_eplb0_mtp3_ccb-UCX"
PP8 = "gb200_deepseek-r1-fp4_128k8k_con1_ctx1_pp8_gen1_tep8_eplb0_mtp3_ccb-NIXL"
LITE = "gb200_deepseek-v3-lite-fp8_1k1k_con256_ctx1_tp1_gen1_tp2_eplb0_mtp0_ccb-NIXL"


def real(path: Path) -> dict[str, Any]:
    if not path.is_file():
        pytest.skip(f"shared data file {path} is not present")
    return load_perf_config(path)


def sizing(gpus: int, nodes: int, gpn: int, mode: str) -> PerfSizing:
    return PerfSizing(
        gpus=gpus,
        nodes=nodes,
        gpus_per_node=gpn,
        total_gpus=nodes * gpn,
        ntasks_per_node=gpn,
        mode=mode,
    )


# ---- the real data files ----------------------------------------------------------------


def test_ucx_disagg_is_24_gpus_on_6_nodes() -> None:
    cfg = real(DISAGG / f"{UCX}.yaml")
    # the YAML alias (*id001) resolves to the same mapping
    assert cfg["worker_config"]["ctx"]["speculative_config"] == {
        "decoding_type": "MTP",
        "max_draft_len": 3,
    }
    for mode in ("e2e", "gen_only", None):
        assert size_config(cfg, kind="disagg", benchmark_mode=mode) == sizing(
            24, 6, 4, mode or "e2e"
        )
    # ctx_only runs one ctx server: TP4 on one node
    assert size_config(cfg, kind="ctx_only") == sizing(4, 1, 4, "ctx_only")


def test_gb200_test_db_matches_the_ucx_config() -> None:
    path = TEST_DB / "l0_gb200_multi_nodes_perf_sanity_ctx2_node1_gpu4_gen1_node4_gpu16.yml"
    if not path.is_file():
        pytest.skip(f"shared data file {path} is not present")
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    block = doc[path.stem][0]
    want = block["condition"]["ranges"]["system_gpu_count"]
    checked = 0
    for line in block["tests"]:
        tid = parse_perf_test_id(line)
        cfg_path = config_path_for(DATA, tid)
        if not cfg_path.is_file():  # the eplb288 variant was not collected
            continue
        s = size_config(load_perf_config(cfg_path), kind=tid.kind, benchmark_mode=tid.mode)
        assert want["gte"] == s.total_gpus == s.gpus == want["lte"] == 24
        assert s.nodes == 6
        checked += 1
    assert checked == 1


def test_b200_test_db_ids_against_the_fp4_config() -> None:
    path = TEST_DB / "l0_b200_multi_gpus_perf_sanity.yml"
    if not path.is_file():
        pytest.skip(f"shared data file {path} is not present")
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    block = doc[path.stem][0]
    system_gpus = block["condition"]["ranges"]["system_gpu_count"]["lte"]
    seen = {}
    for line in block["tests"]:
        tid = parse_perf_test_id(line)
        cfg_path = config_path_for(DATA, tid)
        if not cfg_path.is_file():
            continue
        cfg = load_perf_config(cfg_path)
        s = size_config(
            cfg,
            kind=tid.kind,
            server_name=tid.server_name,
            benchmark_mode=tid.mode,
            source=str(cfg_path),
        )
        assert s.nodes == 1 and s.total_gpus == system_gpus == 8
        seen[tid.server_name] = s.gpus
    assert seen == {
        "r1_fp4_v2_tp4_mtp3_1k1k": 4,
        "r1_fp4_v2_tp4_mtp3_8k1k": 4,
        "r1_fp4_v2_dep8_mtp1_1k1k": 8,
        "r1_fp4_v2_dep8_mtp1_8k1k": 8,
    }


def test_pp8_nixl_multiplies_pipeline_parallelism() -> None:
    cfg = real(DISAGG / f"{PP8}.yaml")
    assert size_config(cfg, kind="disagg", benchmark_mode="e2e") == sizing(16, 4, 4, "e2e")
    assert size_config(cfg, kind="ctx_only") == sizing(8, 2, 4, "ctx_only")


def test_small_disagg_gets_a_node_per_server() -> None:
    cfg = real(DISAGG / f"{LITE}.yaml")
    # ctx TP1 + gen TP2 = 3 GPUs, but submit.py gives every server whole nodes: 2 nodes
    assert size_config(cfg, kind="disagg") == sizing(3, 2, 4, "e2e")
    assert size_config(cfg, kind="ctx_only") == sizing(1, 1, 4, "ctx_only")


def test_world_size_only_config() -> None:
    cfg = real(AGG / "llama3_1_8b_fp8_ad_hopper.yaml")
    assert size_config(cfg, kind="aggr", server_name="llama3_1_8b_ad_ws1_1k1k") == sizing(
        1, 1, 1, "aggr"
    )


def test_unknown_server_lists_the_real_names() -> None:
    cfg = real(AGG / "deepseek_r1_fp4_v2_blackwell.yaml")
    with pytest.raises(BuildError) as err:
        size_config(
            cfg,
            kind="aggr",
            server_name="r1_fp4_v2_tp2",
            name_field="perf_test_name",
            source="deepseek_r1_fp4_v2_blackwell.yaml",
        )
    assert err.value.field == "perf_test_name"
    assert "'r1_fp4_v2_tp2'" in err.value.problem
    assert "deepseek_r1_fp4_v2_blackwell.yaml" in err.value.problem
    for name in server_names(cfg):
        assert name in err.value.problem
    assert len(server_names(cfg)) == 4


def test_detect_kind_on_real_files() -> None:
    assert detect_kind(real(AGG / "deepseek_r1_fp4_v2_blackwell.yaml")) == "aggr"
    ucx = real(DISAGG / f"{UCX}.yaml")
    assert detect_kind(ucx) == "disagg"
    assert detect_kind(ucx, "ctx_only") == "ctx_only"
    assert size_config(ucx, kind=None, benchmark_mode="gen_only").gpus == 24


# ---- synthetic configs ---------------------------------------------------------------------


def agg(gpn: int = 8, **server: Any) -> dict[str, Any]:
    return {
        "hardware": {"gpus_per_node": gpn},
        "server_configs": [{"name": "a", **server}, {"name": "b"}],
    }


def disagg(
    ctx: dict[str, Any],
    gen: dict[str, Any],
    *,
    gpn: int = 4,
    num_ctx: int = 1,
    num_gen: int = 1,
    bench_mode: str = "e2e",
) -> dict[str, Any]:
    return {
        "hardware": {"gpus_per_node": gpn, "num_ctx_servers": num_ctx, "num_gen_servers": num_gen},
        "benchmark": {"mode": bench_mode},
        "worker_config": {"ctx": ctx, "gen": gen},
    }


def test_defaults_and_context_parallel() -> None:
    assert size_config(agg(), kind="aggr", server_name="b") == sizing(1, 1, 8, "aggr")
    cfg = agg(tensor_parallel_size=4, pipeline_parallel_size=2, context_parallel_size=2)
    assert size_config(cfg, kind="aggr", server_name="a") == sizing(16, 2, 8, "aggr")
    # world_size is used only when neither tp nor pp is given
    assert (
        size_config(agg(world_size=4, tensor_parallel_size=2), kind="aggr", server_name="a").gpus
        == 2
    )


def test_gen_only_no_context_drops_ctx_servers() -> None:
    cfg = disagg(
        {"tensor_parallel_size": 4},
        {"tensor_parallel_size": 8},
        num_ctx=2,
        bench_mode="gen_only_no_context",
    )
    assert size_config(cfg, kind="disagg", benchmark_mode="gen_only") == sizing(
        8, 2, 4, "gen_only_no_context"
    )
    # only gen_only honours it
    assert size_config(cfg, kind="disagg", benchmark_mode="e2e") == sizing(16, 4, 4, "e2e")


@pytest.mark.parametrize(
    "cfg, kwargs, field, words",
    [
        (
            {"hardware": {"gpus_per_node": 4}},
            {"kind": "aggr", "server_name": "a"},
            "perf_config_yaml",
            "neither worker_config",
        ),
        (
            {"server_configs": [{"name": "a"}]},
            {"kind": "aggr", "server_name": "a"},
            "perf_config_yaml",
            "hardware.gpus_per_node is missing",
        ),
        (
            agg(gpn=0),
            {"kind": "aggr", "server_name": "a"},
            "perf_config_yaml",
            "not a positive integer",
        ),
        (agg(), {"kind": "aggr"}, "test_cmd", "no server config named"),
        (agg(), {"kind": "aggr", "server_name": "zz"}, "test_cmd", "(server configs: a, b)"),
        (
            agg(tensor_parallel_size="4"),
            {"kind": "aggr", "server_name": "a"},
            "perf_config_yaml",
            "tensor_parallel_size is '4'",
        ),
        (agg(), {"kind": "disagg"}, "perf_config_yaml", "is aggregated"),
        (
            disagg({}, {}),
            {"kind": "aggr", "server_name": "a"},
            "perf_config_yaml",
            "is disaggregated",
        ),
        (
            disagg({}, {}),
            {"kind": "disagg", "benchmark_mode": "ctx_only"},
            "test_cmd",
            "is not one of e2e, gen_only",
        ),
        (
            {"hardware": {"gpus_per_node": 4}, "worker_config": {"gen": {}}},
            {"kind": "disagg"},
            "perf_config_yaml",
            "hardware.num_ctx_servers is missing",
        ),
        (
            disagg({}, {}, num_ctx=0, num_gen=0),
            {"kind": "disagg"},
            "perf_config_yaml",
            "runs no server",
        ),
        (
            {
                "hardware": {"gpus_per_node": 4, "num_ctx_servers": 1, "num_gen_servers": 1},
                "worker_config": {"gen": {}},
            },
            {"kind": "disagg"},
            "perf_config_yaml",
            "worker_config.ctx is missing",
        ),
        (
            agg(),
            {"kind": None, "benchmark_mode": "e2e"},
            "perf_config_yaml",
            "for an aggregated config",
        ),
    ],
)
def test_errors(cfg: dict[str, Any], kwargs: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(BuildError) as err:
        size_config(cfg, **kwargs)
    assert err.value.field == field
    assert words in err.value.problem, err.value.problem


_size = st.integers(1, 16)


@given(tp=_size, pp=st.integers(1, 4), cp=st.integers(1, 2), gpn=st.integers(1, 8))
def test_aggregated_arithmetic(tp: int, pp: int, cp: int, gpn: int) -> None:
    cfg = agg(gpn, tensor_parallel_size=tp, pipeline_parallel_size=pp, context_parallel_size=cp)
    s = size_config(cfg, kind="aggr", server_name="a")
    assert s.gpus == tp * pp * cp
    assert (s.nodes - 1) * gpn < s.gpus <= s.nodes * gpn == s.total_gpus
    assert s.ntasks_per_node == gpn


@given(
    ctx_tp=_size,
    gen_tp=_size,
    ctx_pp=st.integers(1, 8),
    num_ctx=st.integers(0, 3),
    num_gen=st.integers(1, 3),
    gpn=st.sampled_from([1, 2, 4, 8]),
)
def test_disaggregated_arithmetic(
    ctx_tp: int, gen_tp: int, ctx_pp: int, num_ctx: int, num_gen: int, gpn: int
) -> None:
    cfg = disagg(
        {"tensor_parallel_size": ctx_tp, "pipeline_parallel_size": ctx_pp},
        {"tensor_parallel_size": gen_tp},
        gpn=gpn,
        num_ctx=num_ctx,
        num_gen=num_gen,
    )
    s = size_config(cfg, kind="disagg", benchmark_mode="gen_only")
    ctx = ctx_tp * ctx_pp
    assert s.gpus == num_ctx * ctx + num_gen * gen_tp
    assert s.nodes == num_ctx * math.ceil(ctx / gpn) + num_gen * math.ceil(gen_tp / gpn)
    assert s.total_gpus == s.nodes * gpn >= s.gpus


# ---- loading and paths -----------------------------------------------------------------------


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="does not exist") as err:
        load_perf_config(tmp_path / "nope.yaml")
    assert err.value.field == "perf_config_yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n", encoding="utf-8")
    with pytest.raises(BuildError, match="not valid YAML"):
        load_perf_config(bad, field="x")
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("- 1\n", encoding="utf-8")
    with pytest.raises(BuildError, match="not a YAML mapping"):
        load_perf_config(scalar)


def test_config_path_for() -> None:
    root = Path("/r")
    assert config_path_for(root, parse_perf_test_id("test_e2e[aggr_upload-cfg-s]")) == Path(
        "/r/tests/scripts/perf-sanity/aggregated/cfg.yaml"
    )
    assert config_path_for(root, parse_perf_test_id("test_e2e[disagg-e2e-a-b]")) == Path(
        "/r/tests/scripts/perf-sanity/disaggregated/a-b.yaml"
    )
    assert config_path_for(root, parse_perf_test_id("test_e2e[aggr-ctx_only-a-b]")) == Path(
        "/r/tests/scripts/perf-sanity/disaggregated/a-b.yaml"
    )


def test_world_size_is_not_read_for_a_server_config() -> None:
    """submit.py multiplies tp*pp*cp (each default 1) and launches that many tasks; a
    world_size of 4 with no tp gets 1 task, so the job is sized 1, not 4."""
    assert size_config(agg(world_size=4), kind="aggr", server_name="a") == sizing(1, 1, 8, "aggr")


def test_gen_only_no_context_id_sizes_the_one_gen_server() -> None:
    cfg = real(DISAGG / f"{LITE}.yaml")  # gen TP2 on a 4-GPU node, ctx TP1 not run
    tid = parse_perf_test_id(f"test_e2e[aggr_upload-gen_only_no_context-{LITE}]")
    got = size_config(cfg, kind=tid.kind, benchmark_mode=tid.mode)
    assert got == sizing(2, 1, 4, "gen_only_no_context")
    ws = disagg({}, {"world_size": 8, "tensor_parallel_size": 2})
    assert size_config(ws, kind="gen_only_no_context").gpus == 8  # read here, and only here
    with pytest.raises(BuildError) as err:
        size_config(real(DISAGG / f"{UCX}.yaml") | {"hardware": {"gpus_per_node": 4,
                    "num_gen_servers": 2}}, kind="gen_only_no_context")  # fmt: skip
    assert "num_gen_servers is 2" in err.value.problem

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.resolve.perf.testid import (
    TIMEOUT_SUFFIX_RE,
    PerfTestId,
    is_perf_sanity_cmd,
    parse_perf_test_id,
    strip_timeout,
)

# /work/<clone>/tests/this_file.py -> /work/shared/data/trtllm
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "trtllm"
TEST_DB = DATA / "tests" / "integration" / "test_lists" / "test-db"

CASE_EXECUTOR_CMD = (
    "pytest tests/integration/defs/perf/test_perf_sanity.py -v "
    '"test_e2e[aggr-gpt_oss-gpt_oss_tp4ep4pp2_mtp1]"'
)


def test_case_executor_example() -> None:
    tid = parse_perf_test_id(CASE_EXECUTOR_CMD)
    assert tid == PerfTestId(
        raw_id="perf/test_perf_sanity.py::test_e2e[aggr-gpt_oss-gpt_oss_tp4ep4pp2_mtp1]",
        prefix="aggr",
        kind="aggr",
        config_base="gpt_oss",
        server_name="gpt_oss_tp4ep4pp2_mtp1",
        mode=None,
        timeout_minutes=None,
    )
    assert tid.label == "aggr-gpt_oss-gpt_oss_tp4ep4pp2_mtp1"
    assert tid.config_folder == "aggregated"
    assert not tid.uploads


@pytest.mark.parametrize(
    "text",
    [
        "pytest tests/integration/defs/perf/test_perf_sanity.py::test_e2e[aggr-cfg-srv-a]",
        "perf/test_perf_sanity.py::test_e2e[aggr-cfg-srv-a]",
        "perf/test_perf_sanity.py::test_e2e[aggr-cfg-srv-a] TIMEOUT (90)",
        "  - perf/test_perf_sanity.py::test_e2e[aggr-cfg-srv-a] TIMEOUT (90)  # note",
        "pytest tests/integration/defs/perf/test_perf_sanity.py -k 'test_e2e[aggr-cfg-srv-a]'",
        'pytest tests/integration/defs/perf/test_perf_sanity.py -k "aggr-cfg-srv-a"',
        "pytest tests/integration/defs/perf/test_perf_sanity.py -kaggr-cfg-srv-a",
        "cd tests/integration/defs && pytest -v perf/test_perf_sanity.py "
        "'perf/test_perf_sanity.py::test_e2e[aggr-cfg-srv-a]'",
    ],
)
def test_forms(text: str) -> None:
    tid = parse_perf_test_id(text)
    assert (tid.kind, tid.config_base, tid.server_name) == ("aggr", "cfg", "srv-a")
    assert tid.raw_id == "perf/test_perf_sanity.py::test_e2e[aggr-cfg-srv-a]"


def test_timeout_kept_in_minutes() -> None:
    tid = parse_perf_test_id("perf/test_perf_sanity.py::test_e2e[aggr_upload-c-s] TIMEOUT (120)")
    assert tid.timeout_minutes == 120
    assert tid.prefix == "aggr_upload" and tid.uploads
    assert tid.test_list_id == "perf/test_perf_sanity.py::test_e2e[aggr-c-s]"


def test_disagg_and_ctx_only() -> None:
    d = parse_perf_test_id(
        "perf/test_perf_sanity.py::test_e2e[disagg_upload-gen_only-"
        "gb200_deepseek-r1-fp4_1k1k_con2048_ctx2_dep4_gen1_dep16_eplb0_mtp3_ccb-UCX] TIMEOUT (120)"
    )
    assert d.kind == "disagg" and d.mode == "gen_only" and d.server_name is None
    assert (
        d.config_base
        == "gb200_deepseek-r1-fp4_1k1k_con2048_ctx2_dep4_gen1_dep16_eplb0_mtp3_ccb-UCX"
    )
    assert d.config_folder == "disaggregated"
    assert d.test_list_id.endswith("[disagg-gen_only-" + d.config_base + "]")

    c = parse_perf_test_id("test_e2e[aggr-ctx_only-b200_deepseek-r1-fp4_1k1k_x-NIXL]")
    assert c.kind == "ctx_only" and c.mode == "ctx_only" and c.prefix == "aggr"
    assert c.config_base == "b200_deepseek-r1-fp4_1k1k_x-NIXL"
    assert c.config_folder == "disaggregated"
    assert c.test_list_id.endswith("[aggr-ctx_only-b200_deepseek-r1-fp4_1k1k_x-NIXL]")


def test_aggregated_without_server() -> None:
    tid = parse_perf_test_id("test_e2e[aggr-cfg]")
    assert tid.server_name is None and tid.config_base == "cfg"


@pytest.mark.parametrize(
    "text, words",
    [
        ("pytest tests/integration/defs/accuracy/test_llm_api_pytorch.py", "no perf-sanity"),
        ("test_e2e[foo-cfg-s]", "not one of"),
        ("test_e2e[disagg-cfg]", "e2e|gen_only"),
        ("test_e2e[disagg-ctx_only-cfg]", "e2e|gen_only"),
        ("test_e2e[aggr-ctx_only]", "names no disaggregated config"),
        ("test_e2e[aggr]", "names no config"),
        ("test_e2e[aggr-a-b] test_e2e[aggr-a-c]", "2 perf-sanity selections"),
        ("# - perf/test_perf_sanity.py::test_e2e[aggr-a-b] TIMEOUT (90)", "commented out"),
    ],
)
def test_errors(text: str, words: str) -> None:
    with pytest.raises(BuildError) as err:
        parse_perf_test_id(text, field="perf_test_name")
    assert err.value.field == "perf_test_name"
    assert words in err.value.problem


def test_same_id_twice_is_one() -> None:
    tid = parse_perf_test_id("test_e2e[aggr-a-b] perf/test_perf_sanity.py::test_e2e[aggr-a-b]")
    assert tid.server_name == "b"


def test_is_perf_sanity_cmd() -> None:
    assert is_perf_sanity_cmd(CASE_EXECUTOR_CMD)
    assert is_perf_sanity_cmd("python submit.py --config-file tests/scripts/perf-sanity/a.yaml")
    assert not is_perf_sanity_cmd("pytest tests/integration/defs/test_e2e.py::test_x")
    assert not is_perf_sanity_cmd("pytest accuracy/test_llm_api_pytorch.py -k perf")


_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.", min_size=1, max_size=12)


@given(
    prefix=st.sampled_from(["aggr", "aggr_upload"]),
    base=_name,
    server=st.lists(_name, min_size=1, max_size=3),
    minutes=st.none() | st.integers(1, 999),
)
def test_aggregated_round_trip(
    prefix: str, base: str, server: list[str], minutes: int | None
) -> None:
    server_name = "-".join(server)
    line = f"perf/test_perf_sanity.py::test_e2e[{prefix}-{base}-{server_name}]"
    if minutes is not None:
        line += f" TIMEOUT ({minutes})"
    tid = parse_perf_test_id(line)
    if base == "ctx_only":  # `aggr-ctx_only-<config>` is the ctx_only form
        assert tid.kind == "ctx_only"
        return
    assert (tid.prefix, tid.config_base, tid.server_name, tid.timeout_minutes) == (
        prefix,
        base,
        server_name,
        minutes,
    )
    assert TIMEOUT_SUFFIX_RE.sub("", line) == tid.raw_id


@given(
    prefix=st.sampled_from(["disagg", "disagg_upload"]),
    mode=st.sampled_from(["e2e", "gen_only"]),
    base=st.lists(_name, min_size=1, max_size=4),
)
def test_disaggregated_round_trip(prefix: str, mode: str, base: list[str]) -> None:
    cfg = "-".join(base)
    tid = parse_perf_test_id(f'pytest perf/test_perf_sanity.py "test_e2e[{prefix}-{mode}-{cfg}]"')
    assert (tid.kind, tid.mode, tid.config_base) == ("disagg", mode, cfg)


def test_strip_timeout() -> None:
    assert strip_timeout("x TIMEOUT (5)") == ("x", 5)
    assert strip_timeout("x TIMEOUT(5)  ") == ("x", 5)
    assert strip_timeout("x") == ("x", None)


def _test_db_ids(name: str) -> list[str]:
    path = TEST_DB / name
    if not path.is_file():
        pytest.skip(f"shared data file {path} is not present")
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [t for block in doc[path.stem] for t in block["tests"]]


def test_every_real_b200_id_parses() -> None:
    ids = _test_db_ids("l0_b200_multi_gpus_perf_sanity.yml")
    parsed = [parse_perf_test_id(line) for line in ids]
    assert len(parsed) == 23
    kinds = {p.kind for p in parsed}
    assert kinds == {"aggr", "ctx_only"}
    assert all(p.prefix == "aggr_upload" for p in parsed)
    fp4 = [p for p in parsed if p.config_base == "deepseek_r1_fp4_v2_blackwell"]
    assert [p.server_name for p in fp4] == [
        "r1_fp4_v2_tp4_mtp3_1k1k",
        "r1_fp4_v2_tp4_mtp3_8k1k",
        "r1_fp4_v2_dep8_mtp1_1k1k",
        "r1_fp4_v2_dep8_mtp1_8k1k",
    ]
    assert [p.timeout_minutes for p in fp4] == [None, None, 90, 90]


def test_every_real_gb200_id_parses() -> None:
    ids = _test_db_ids("l0_gb200_multi_nodes_perf_sanity_ctx2_node1_gpu4_gen1_node4_gpu16.yml")
    parsed = [parse_perf_test_id(line) for line in ids]
    assert [(p.kind, p.mode, p.timeout_minutes) for p in parsed] == [
        ("disagg", "gen_only", 120),
        ("disagg", "gen_only", 120),
    ]


def test_raw_test_db_lines() -> None:
    """Lines read as text (not YAML): the commented-out ones are refused, the rest parse."""
    path = TEST_DB / "l0_b200_multi_gpus_perf_sanity.yml"
    if not path.is_file():
        pytest.skip(f"shared data file {path} is not present")
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if "test_e2e[" in ln]
    live = [ln for ln in lines if not ln.strip().startswith("#")]
    assert len(lines) == 27 and len(live) == 23
    for line in lines:
        if line in live:
            assert parse_perf_test_id(line).raw_id in line
        else:
            with pytest.raises(BuildError, match="commented out"):
                parse_perf_test_id(line)


# The newer grammar of submit.py (TRT-LLM jenkins/scripts/perf/local/submit.py at 38008eab,
# parse_test_string): a time_breakdown segment after e2e/ctx_only, and gen_only_no_context
# behind an aggr prefix, both reading a disaggregated config.
@pytest.mark.parametrize(
    ("label", "kind", "mode", "base", "breakdown", "listed"),
    [
        ("disagg_upload-e2e-time_breakdown-cfg-UCX", "disagg", "e2e", "cfg-UCX", True,
         "disagg-e2e-time_breakdown-cfg-UCX"),
        ("aggr_upload-ctx_only-time_breakdown-cfg", "ctx_only", "ctx_only", "cfg", True,
         "aggr-ctx_only-time_breakdown-cfg"),
        ("aggr_upload-gen_only_no_context-cfg-NIXL", "gen_only_no_context",
         "gen_only_no_context", "cfg-NIXL", False, "aggr-gen_only_no_context-cfg-NIXL"),
    ],
)  # fmt: skip
def test_newer_id_forms(
    label: str, kind: str, mode: str, base: str, breakdown: bool, listed: str
) -> None:
    tid = parse_perf_test_id(f"perf/test_perf_sanity.py::test_e2e[{label}]")
    assert (tid.kind, tid.mode, tid.config_base, tid.time_breakdown) == (
        kind, mode, base, breakdown,
    )  # fmt: skip
    assert tid.config_folder == "disaggregated"
    assert tid.test_list_id == f"perf/test_perf_sanity.py::test_e2e[{listed}]"


@pytest.mark.parametrize(
    ("label", "words"),
    [
        ("disagg-gen_only-time_breakdown-cfg", "time_breakdown exists for e2e and ctx_only"),
        ("disagg-e2e-time_breakdown", "names no disaggregated config"),
        ("aggr-gen_only_no_context-time_breakdown-cfg", "not gen_only_no_context"),
    ],
)
def test_newer_forms_refused_as_submit_py_refuses(label: str, words: str) -> None:
    with pytest.raises(BuildError) as err:
        parse_perf_test_id(f"test_e2e[{label}]")
    assert words in err.value.problem

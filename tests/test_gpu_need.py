"""GPUs from what a test really needs: `gpuN` marks, `-m`, the body's device-count skips
and the `mpirun -n N` it launches (decision gpu-need).

The sources below are written for these tests; each reproduces the decorators and the lines
that decide the GPU count of one test of NVIDIA/TensorRT-LLM, at the commit named beside it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trtllm_script_builder.workflows.pytest_sizing import size_pytest

DEFS = Path("tests/integration/defs")

# tests/integration/defs/accuracy/test_llm_api_pytorch.py @ 3277953654b9b2863dae4f1cb81856b172837db4
MAVERICK = """\
import pytest
from ..conftest import get_device_count, get_device_memory, parametrize_with_ids


@pytest.mark.timeout(14400)
class TestLlama4MaverickInstruct:
    @pytest.mark.skip_less_device_memory(140000)
    @parametrize_with_ids("cuda_graph", [False, True])
    @pytest.mark.parametrize(
        "tp_size,pp_size,ep_size",
        [(8, 1, 1), (8, 1, 4), (8, 1, 8), (4, 1, 1), (4, 1, 2), (4, 1, 4)],
        ids=["tp8", "tp8ep4", "tp8ep8", "tp4", "tp4ep2", "tp4ep4"])
    def test_auto_dtype(self, cuda_graph, tp_size, pp_size, ep_size):
        if get_device_count() != tp_size * pp_size:
            pytest.skip("the GPU count is not the world size")
        if get_device_memory() < 240000 and get_device_count() < 8:
            pytest.skip("too little memory")
        run(tp_size, pp_size, ep_size, cuda_graph)
"""

# tests/integration/defs/accuracy/test_disaggregated_serving.py @ 7bacc81ea1e5517fe70081b9a479a7e820bc2bfd
DISAGG = """\
import pytest
from ..conftest import get_device_count, parametrize_with_ids


class TestLlama3_1_8BInstruct:
    @pytest.mark.parametrize("tp,pp", [(1, 2), (2, 1), (2, 2)], ids=["tp1pp2", "tp2pp1", "tp2pp2"])
    @pytest.mark.parametrize("testset", ["GSM8K", "MMLU"])
    def test_tp_pp_symmetric(self, tp, pp, testset):
        if tp * pp * 2 > get_device_count():
            pytest.skip("one context and one generation server")
        run(pp, tp, pp, tp, testset)

    @parametrize_with_ids("ctx_pp", [2, 4])
    @parametrize_with_ids("gen_tp", [1, 2])
    @pytest.mark.parametrize("testset", ["GSM8K", "MMLU"])
    def test_ctx_pp_gen_tp_asymmetric(self, ctx_pp, gen_tp, testset):
        if ctx_pp + gen_tp > get_device_count():
            pytest.skip("not enough GPUs")
        run(ctx_pp, gen_tp, testset)

    def test_with_fixture(self, world):
        if world > get_device_count():
            pytest.skip("not enough GPUs")
"""

# tests/unittest/llmapi/test_llm_multi_gpu_pytorch.py @ 5dedf53b14d94f0b53c1bff0e560af11dc3eaf5d
MULTI_GPU = """\
import pytest


@pytest.mark.gpu4
def test_tinyllama_logits_processor_tp2pp2():
    harness(tensor_parallel_size=2, pipeline_parallel_size=2)


@pytest.mark.gpu2
@pytest.mark.part0
@pytest.mark.parametrize("tp_size, pp_size", [(1, 2), (2, 1)])
def test_tinyllama_logits_processor_2gpu(tp_size: int, pp_size: int):
    harness(tensor_parallel_size=tp_size, pipeline_parallel_size=pp_size)


@pytest.mark.gpu2
def test_llama_v2_13b_lora_tp2():
    harness(tensor_parallel_size=2)


def test_one_gpu():
    harness()
"""

# tests/integration/defs/test_e2e.py @ 23c28fb3dbd125c0dcbf1b3a2311d178b24388fd
E2E = """\
def test_trtllm_bench_mgmn(llm_root, llm_venv):
    model_name = "meta-llama/Llama-3.1-8B"
    cmd = f"mpirun --allow-run-as-root -n 2 trtllm-llmapi-launch trtllm-bench --model {model_name} " \\
          f"throughput --backend pytorch --tp 2"
    check_call(cmd, shell=True)


def test_listed_launch(llm_venv):
    llm_venv.run_cmd(["mpirun", "-np", "4", "python3", "run.py"])


def test_launch_of_a_variable(n):
    check_call(f"mpirun -n {n} python3 run.py", shell=True)
"""


# tests/integration/defs/accuracy/test_llm_api_pytorch.py, a stored version (43959 characters)
# from before `skip_less_device(4)` was put on TestLlama3_1_8BInstruct::test_bfloat16_4gpus:
# only its parametrize values say that tp4, tp2pp2 and pp4 start four ranks
LLAMA_8B = """\
import pytest
from defs.conftest import parametrize_with_ids


class TestLlama3_1_8BInstruct:
    @parametrize_with_ids("torch_compile", [False, True])
    @parametrize_with_ids("attn_backend", ["TRTLLM", "FLASHINFER"])
    @pytest.mark.parametrize("tp_size,pp_size", [(4, 1), (2, 2), (1, 4)],
                             ids=["tp4", "tp2pp2", "pp4"])
    def test_bfloat16_4gpus(self, tp_size, pp_size, attn_backend,
                            torch_compile):
        if torch_compile and pp_size > 1:
            pytest.skip("Pipeline parallel with torch.compile is not supported yet.")
        llm = LLM(self.MODEL_PATH, tensor_parallel_size=tp_size, pipeline_parallel_size=pp_size)

    @pytest.mark.parametrize(
        "tp_size,pp_size,ep_size,attention_dp,cuda_graph,overlap_scheduler",
        [(1, 1, 1, False, False, True)],
        ids=["latency"])
    def test_fp8_block_scales(self, tp_size, pp_size, ep_size, attention_dp,
                              cuda_graph, overlap_scheduler):
        run(tp_size, pp_size, ep_size)
"""


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    for rel, text in {
        DEFS / "accuracy" / "test_llm_api_pytorch.py": MAVERICK
        + "\n\n"
        + LLAMA_8B.split("\n", 2)[2],
        DEFS / "accuracy" / "test_disaggregated_serving.py": DISAGG,
        DEFS / "test_e2e.py": E2E,
        Path("tests/unittest/llmapi/test_llm_multi_gpu_pytorch.py"): MULTI_GPU,
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("selection", "devices"),
    [
        # the body skips unless the GPU count equals tp*pp
        (
            "accuracy/test_llm_api_pytorch.py::TestLlama4MaverickInstruct::test_auto_dtype[tp8-cuda_graph=False]",
            8,
        ),
        (
            "accuracy/test_llm_api_pytorch.py::TestLlama4MaverickInstruct::test_auto_dtype[tp4ep2-cuda_graph=True]",
            4,
        ),
        ("accuracy/test_llm_api_pytorch.py::TestLlama4MaverickInstruct::test_auto_dtype", 8),
        # a context and a generation server: 2*tp*pp
        (
            "accuracy/test_disaggregated_serving.py::TestLlama3_1_8BInstruct::test_tp_pp_symmetric[GSM8K-tp2pp2]",
            8,
        ),
        (
            "accuracy/test_disaggregated_serving.py::TestLlama3_1_8BInstruct::test_tp_pp_symmetric[MMLU-tp1pp2]",
            4,
        ),
        (
            "accuracy/test_disaggregated_serving.py::TestLlama3_1_8BInstruct::test_ctx_pp_gen_tp_asymmetric[GSM8K-gen_tp=2-ctx_pp=4]",
            6,
        ),
        # @pytest.mark.gpu4
        (
            "unittest/llmapi/test_llm_multi_gpu_pytorch.py::test_tinyllama_logits_processor_tp2pp2",
            4,
        ),
        (
            "unittest/llmapi/test_llm_multi_gpu_pytorch.py::test_tinyllama_logits_processor_2gpu[1-2]",
            2,
        ),
        ("unittest/llmapi/test_llm_multi_gpu_pytorch.py::test_one_gpu", None),
        # no mark, no skip: the parametrize values the id names start tp_size * pp_size ranks
        (
            "accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_bfloat16_4gpus[tp4-attn_backend=TRTLLM-torch_compile=False]",
            4,
        ),
        (
            "accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_bfloat16_4gpus[tp2pp2-attn_backend=FLASHINFER-torch_compile=True]",
            4,
        ),
        ("accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_bfloat16_4gpus", 4),
        (
            "accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_fp8_block_scales[latency]",
            None,
        ),
        # the body runs `mpirun -n 2`
        ("test_e2e.py::test_trtllm_bench_mgmn", 2),
        ("test_e2e.py::test_listed_launch", 4),
    ],
)
def test_the_gpus_a_test_needs(repo: Path, selection: str, devices: int | None) -> None:
    found = size_pytest(f"pytest -v {selection}", repo)
    assert found.devices == devices, found.notes


def test_the_source_of_the_count_is_named(repo: Path) -> None:
    found = size_pytest(
        "pytest accuracy/test_disaggregated_serving.py::TestLlama3_1_8BInstruct::"
        "test_tp_pp_symmetric[GSM8K-tp2pp2]",
        repo,
    )
    assert "tp * pp * 2 > get_device_count()" in found.source
    unit = size_pytest(
        "pytest unittest/llmapi/test_llm_multi_gpu_pytorch.py::test_tinyllama_logits_processor_tp2pp2",
        repo,
    )
    assert "gpu4 mark" in unit.source
    assert unit.workdir_rel == "tests"  # unit tests run from tests/, as their conftest expects


@pytest.mark.parametrize(
    ("markexpr", "devices"),
    [("gpu4", 4), ("gpu2 and part0", 2), ("gpu2", 2), ("not (gpu2 or gpu4)", None)],
)
def test_a_mark_expression_selects_the_tests_it_runs(
    repo: Path, markexpr: str, devices: int | None
) -> None:
    found = size_pytest(
        f'pytest unittest/llmapi/test_llm_multi_gpu_pytorch.py -m "{markexpr}"', repo
    )
    assert found.devices == devices


def test_a_need_that_cannot_be_known_is_warned(repo: Path) -> None:
    found = size_pytest("pytest test_e2e.py::test_launch_of_a_variable", repo)
    assert found.devices is None
    assert any("test_launch_of_a_variable runs `mpirun -n" in n for n in found.notes)
    fixture = size_pytest(
        "pytest accuracy/test_disaggregated_serving.py::TestLlama3_1_8BInstruct::test_with_fixture",
        repo,
    )
    assert fixture.devices is None
    assert any("world > get_device_count()" in n and "not known" in n for n in fixture.notes)

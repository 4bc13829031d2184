"""A small test file shaped like TensorRT-LLM's accuracy tests, for the bundled example."""

import pytest


class TestLlama3_1_8BInstruct:
    def test_auto_dtype(self):
        assert True

    @pytest.mark.skip_less_device(4)
    @pytest.mark.parametrize("tp_size,pp_size", [(4, 1), (2, 2), (1, 4)], ids=["tp4", "tp2pp2", "pp4"])
    def test_bfloat16_4gpus(self, tp_size, pp_size):
        assert tp_size * pp_size == 4

    @pytest.mark.parametrize(
        "tp_size",
        [1, pytest.param(2, marks=pytest.mark.skip_less_device(2), id="tp2")],
    )
    def test_fp8(self, tp_size):
        assert tp_size in (1, 2)


class TestDeepSeekR1:
    # As TensorRT-LLM's multi-node tests: the world size counts the ranks of every node.
    @pytest.mark.skip_less_mpi_world_size(16)
    @pytest.mark.parametrize("tp_size,ep_size", [(16, 16)], ids=["tep16"])
    def test_fp8_blockscale(self, tp_size, ep_size):
        assert tp_size == 16

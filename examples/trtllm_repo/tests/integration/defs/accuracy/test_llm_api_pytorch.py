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

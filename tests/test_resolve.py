"""The pure resolution steps: image, pytest markers, eval/bench/custom parsing, mounts."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.resolve import image as img
from trtllm_script_builder.resolve.commands import (
    parse_bench,
    parse_custom_env,
    parse_eval,
    replace_option,
    split_and,
)
from trtllm_script_builder.resolve.mounts import Mount, assemble, host_to_container
from trtllm_script_builder.workflows.pytest_sizing import (
    _file_timeout_marks,
    inspect_file,
    size_pytest,
    timeout_marks,
)

from .conftest import make_repo, shared_file

# ---------------------------------------------------------------- image


def test_real_properties_exact_key() -> None:
    text = shared_file("jenkins/current_image_tags.properties.with_12_9").read_text()
    x86 = img.image_from_properties(text, "x86_64", "f")
    assert x86.endswith("x86_64-ubuntu24.04-trt10.13.2.6-skip-tritondevel-202510101558-8250")
    assert "12.9" not in x86 and "_12_9" not in x86
    arm = img.image_from_properties(text, "aarch64", "f")
    assert "aarch64" in arm


def test_real_properties_newest() -> None:
    text = shared_file("jenkins/current_image_tags.properties").read_text()
    assert "x86_64-tritondevel" in img.image_from_properties(text, "x86_64", "f")
    assert "sbsa-tritondevel" in img.image_from_properties(text, "aarch64", "f")


@pytest.mark.parametrize(
    ("given", "want"),
    [
        (
            "urm.nvidia.com/sw-tensorrt-docker/tensorrt-llm:tag",
            "urm.nvidia.com#sw-tensorrt-docker/tensorrt-llm:tag",
        ),
        ("localhost:5000/img:1", "localhost:5000#img:1"),
        ("localhost/img:1", "localhost#img:1"),
        ("nvidia/pytorch:24.01-py3", "nvidia/pytorch:24.01-py3"),  # docker.io: no registry host
        ("ubuntu", "ubuntu"),
        ("/scratch/img.sqsh", "/scratch/img.sqsh"),
        ("nvcr.io#nvidia/pytorch:1", "nvcr.io#nvidia/pytorch:1"),
        ("docker://nvcr.io/nvidia/pytorch:1", "docker://nvcr.io#nvidia/pytorch:1"),
    ],
)
def test_enroot_uri(given: str, want: str) -> None:
    assert img.enroot_uri(given) == want


def test_arch_helpers() -> None:
    assert img.arch_from_device_type("GB200") == "aarch64"
    assert img.arch_from_device_type("gh200") == "aarch64"
    assert img.arch_from_device_type("H100") is None
    assert img.normalise_arch("arm64") == "aarch64" and img.normalise_arch("AMD64") == "x86_64"


# ---------------------------------------------------------------- pytest markers


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.mark.parametrize(
    ("selection", "devices"),
    [
        ("accuracy/test_tiny.py::TestTiny::test_four[tp4]", 4),
        ("accuracy/test_tiny.py::TestTiny::test_one", None),
        ("accuracy/test_tiny.py::TestTiny::test_param[tp2]", 2),
        ("accuracy/test_tiny.py::TestTiny::test_param[1]", None),
        ("accuracy/test_tiny.py::TestTiny::test_param", 2),  # every param: the largest
        ("accuracy/test_tiny.py::TestBig::test_class_marked", 8),
        ("accuracy/test_tiny.py::TestBig::test_method_wins", 2),  # method marker over class
        ("accuracy/test_tiny.py::test_world", 2),
        ("accuracy/test_tiny.py::TestTiny", 4),  # a class: its largest test
        ("tests/integration/defs/accuracy/test_tiny.py::TestTiny::test_four[tp2pp2]", 4),
    ],
)
def test_marker_sizing(repo: Path, selection: str, devices: int | None) -> None:
    assert size_pytest(f"pytest -v {selection}", repo).devices == devices


def test_keyword_filter_and_model_names(repo: Path) -> None:
    s = size_pytest("pytest accuracy/test_tiny.py -k test_param", repo)
    assert s.devices == 2
    assert s.workdir_rel == "tests/integration/defs"
    assert size_pytest("pytest accuracy/test_tiny.py::test_world", repo).model_name == "world"
    assert size_pytest("pytest accuracy/test_tiny.py", repo).model_name == "test_tiny"
    assert size_pytest("pytest accuracy/test_tiny.py::TestBig::test_too_big", repo).devices == 16


def test_a_missing_file_is_refused_with_the_nearest_name(repo: Path) -> None:
    with pytest.raises(BuildError) as err:
        size_pytest("pytest accuracy/test_tinyy.py::test_x", repo)
    assert err.value.field == "test_cmd" and "is not under" in err.value.line()
    assert "did you mean accuracy/test_tiny.py?" in err.value.line()


def test_a_missing_file_after_a_cd_is_only_a_note(repo: Path) -> None:
    """Relative to a folder the command changes to: the path cannot be checked here."""
    s = size_pytest("cd elsewhere && pytest nope.py::test_x", repo)
    assert s.devices is None and "not found" in s.notes[0]


@pytest.mark.parametrize(
    ("test_id", "near"),
    [
        ("accuracy/test_tiny.py::TestTiny::test_fuor", "TestTiny::test_four"),
        ("accuracy/test_tiny.py::TestTiyn::test_four", "TestTiny::test_four"),
        ("accuracy/test_tiny.py::TestTiyn", "TestTiny"),
    ],
)
def test_a_misspelt_class_or_function_is_refused(repo: Path, test_id: str, near: str) -> None:
    with pytest.raises(BuildError) as err:
        size_pytest(f"pytest {test_id}", repo)
    assert err.value.field == "test_cmd" and f"did you mean {near}?" in err.value.line()


def test_a_parameter_id_parametrize_cannot_give_is_refused_when_all_ids_are_known(
    repo: Path,
) -> None:
    """Decision parameter-id-check: test_param's only argument is parametrized with literal values
    and ids."""
    with pytest.raises(BuildError, match=r"has no parameter id \[tp3\] \(its ids: 1, tp2\)"):
        size_pytest("pytest accuracy/test_tiny.py::TestTiny::test_param[tp3]", repo)
    ok = size_pytest("pytest accuracy/test_tiny.py::TestTiny::test_param[tp2]", repo)
    assert not any("is not a parameter id" in n for n in ok.notes)


@pytest.mark.parametrize(
    "source",
    [
        # a fixture argument may be parametrized elsewhere (conftest.py)
        "@pytest.mark.parametrize('tp', [1, 2])\ndef test_x(tp, llm_root): pass\n",
        # a name's value is what pytest shows, and it is not read here
        "TP = 2\n@pytest.mark.parametrize('tp', [1, TP])\ndef test_x(tp): pass\n",
        # ids from a function
        "@pytest.mark.parametrize('tp', [1, 2], ids=str)\ndef test_x(tp): pass\n",
        # the class is parametrized as a whole
        "@pytest.mark.parametrize('pp', [1])\nclass TestX:\n"
        "    @pytest.mark.parametrize('tp', [1, 2])\n    def test_x(self, tp, pp): pass\n",
    ],
)
def test_a_parameter_id_that_may_come_from_elsewhere_is_warned(tmp_path: Path, source: str) -> None:
    f = tmp_path / "test_x.py"
    f.write_text("import pytest\n" + source)
    s = size_pytest(f"pytest {f}::test_x[tp3]", tmp_path)
    assert any("[tp3] is not a parameter id" in n for n in s.notes), s.notes


def test_a_folder_outside_the_repo_is_not_walked(repo: Path, tmp_path: Path) -> None:
    """Found by the shell-safety property test: `pytest / ...` walked the whole disk into /proc."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "test_x.py").write_text(
        "import pytest\n@pytest.mark.skip_less_device(8)\ndef test_x(): pass\n"
    )
    for word in ("/", str(outside)):
        s = size_pytest(f"pytest {word} -v", repo)
        assert s.devices is None and any("folder outside" in n for n in s.notes), (word, s)
    assert size_pytest("pytest accuracy/", repo).devices == 16  # a folder in the repo is read


def test_file_parsed_once(repo: Path) -> None:
    inspect_file.cache_clear()
    for _ in range(50):
        size_pytest("pytest accuracy/test_tiny.py::TestTiny::test_four[tp4]", repo)
    assert inspect_file.cache_info().misses == 1


def test_timeout_marks_parse_a_file_once(tmp_path: Path) -> None:
    """build-many sizes a group of many lines of one file: one parse, and each line still gets
    its own test's mark, its class's mark, or none."""
    (tmp_path / "test_m.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.timeout(60)\nclass TestA:\n"
        "    @pytest.mark.timeout(90)\n    def test_x(self): pass\n"
        "    def test_y(self): pass\n\n"
        "class TestB:\n    def test_x(self): pass\n\n"
        "@pytest.mark.timeout(30)\ndef test_z(): pass\n"
    )
    _file_timeout_marks.cache_clear()
    many = " ".join(["test_m.py::TestA::test_y"] * 200)
    assert timeout_marks(f"pytest {many}", tmp_path) == 60  # the class's mark
    assert timeout_marks("pytest test_m.py::TestA::test_x", tmp_path) == 90  # its own wins
    assert timeout_marks("pytest test_m.py::TestB::test_x", tmp_path) is None
    assert timeout_marks("pytest test_m.py::test_z", tmp_path) == 30
    assert timeout_marks("pytest test_m.py::TestB test_m.py::test_z", tmp_path) == 30
    assert timeout_marks("pytest test_m.py", tmp_path) == 90  # the longest of the file
    assert _file_timeout_marks.cache_info().misses == 1


def test_pytest_param_marks_list_and_ids_kwarg(tmp_path: Path) -> None:
    f = tmp_path / "test_x.py"
    f.write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('n', [pytest.param(8, marks=[pytest.mark.skip_less_device(8), pytest.mark.slow]), 1], ids=['big', 'small'])\n"
        "def test_y(n): pass\n"
    )
    assert size_pytest(f"pytest {f}::test_y[big]", tmp_path).devices == 8
    assert size_pytest(f"pytest {f}::test_y[small]", tmp_path).devices is None


# ---------------------------------------------------------------- commands


def test_parse_eval() -> None:
    e = parse_eval(
        "trtllm-eval --model meta/Llama-3.1-8B --tp_size 4 --pp_size=2 --gpus_per_node 4 --max_batch_size 8 gsm8k --num_samples 5"
    )
    assert (e.tp, e.pp, e.gpus_per_node, e.model, e.task) == (4, 2, 4, "meta/Llama-3.1-8B", "gsm8k")
    assert parse_eval("trtllm-eval --model x --trust_remote_code mmlu").task == "mmlu"
    with pytest.raises(BuildError) as err:
        parse_eval("trtllm-eval --model x --tp_size two mmlu")
    assert err.value.field == "eval_cmd"


def test_parse_bench_last_call() -> None:
    b = parse_bench(
        "trtllm-bench --model m prepare-dataset --tp 9 && trtllm-bench --model_path /ckpt/M throughput --tp 2 --pp 2 --ep 4"
    )
    assert (b.tp, b.pp, b.ep, b.world_size) == (2, 2, 4, 4)
    assert b.prep == "trtllm-bench --model m prepare-dataset --tp 9"
    assert b.run.startswith("trtllm-bench --model_path /ckpt/M")
    assert parse_bench("trtllm-bench -m x throughput").prep is None


def test_split_and_respects_quotes() -> None:
    assert split_and("a 'x && y' && b \"c&&d\"") == ["a 'x && y'", 'b "c&&d"']
    assert split_and("echo a\\&\\& && b") == ["echo a\\&\\&", "b"]


def test_custom_env_words() -> None:
    assert parse_custom_env("A='x y' B=2 C=$(rm) D=") == [
        ("A", "x y"),
        ("B", "2"),
        ("C", "$(rm)"),
        ("D", ""),
    ]
    for bad in ("1A=x", "A", "A-B=1"):
        with pytest.raises(BuildError):
            parse_custom_env(bad)


def test_replace_option_keeps_the_rest() -> None:
    cmd = "trtllm-eval --model org/M --tp_size 2 gsm8k"
    assert (
        replace_option(cmd, "--model", "org/M", "/models/org/M")
        == "trtllm-eval --model /models/org/M --tp_size 2 gsm8k"
    )
    assert (
        replace_option("trtllm-eval --model=org/M mmlu", "--model", "org/M", "/m/x y")
        == "trtllm-eval --model='/m/x y' mmlu"
    )


@pytest.mark.parametrize(
    ("cmd", "expected"),
    [
        # a longer id that starts with the old one is another model
        ("trtllm-eval --model org/M-Instruct-FP8 mmlu", None),
        ("trtllm-eval --model=org/M-Instruct-FP8 mmlu", None),
        # text inside a quoted word is no option
        ("echo '--model org/M-Instruct' && trtllm-eval --model org/M-Instruct mmlu",
         "echo '--model org/M-Instruct' && trtllm-eval --model /m/M mmlu"),
        ('echo "--model=org/M-Instruct"', None),
        # the value quoted in the command is still the value
        ("trtllm-eval --model 'org/M-Instruct' mmlu", "trtllm-eval --model /m/M mmlu"),
        ('trtllm-eval --model="org/M-Instruct" mmlu', "trtllm-eval --model=/m/M mmlu"),
        ("trtllm-eval --model_path org/M-Instruct mmlu", None),
    ],
)  # fmt: skip
def test_replace_option_matches_shell_words(cmd: str, expected: str | None) -> None:
    got = replace_option(cmd, "--model", "org/M-Instruct", "/m/M")
    assert got == (cmd if expected is None else expected)


# ---------------------------------------------------------------- mounts


def test_mount_assembly() -> None:
    home = Mount("/home/u", "/home/u", "HOME")
    proj = Mount("/home/u/trt", "/home/u/trt", "repo_root")
    models = [Mount("/data/models", "/models", "models_path")]
    extras = [
        Mount("/home/u/trt/scripts", "/home/u/trt/scripts", "custom_script"),
        Mount("/opt/x", "/opt/x", "custom_script"),
    ]
    out = [m.entry() for m in assemble(home, proj, models, extras)]
    assert out == [
        "/home/u:/home/u",
        "/home/u/trt:/home/u/trt",
        "/data/models:/models",
        "/opt/x:/opt/x",
    ]
    assert (
        host_to_container(assemble(home, proj, models, []), "/data/models/org/M") == "/models/org/M"
    )


def test_keyword_expressions_select_like_pytest(repo: Path) -> None:
    f = "pytest accuracy/test_tiny.py"
    assert size_pytest(f"{f}::TestBig -k 'not test_too_big'", repo).devices == 8
    assert size_pytest(f"{f} -k tp4", repo).devices == 4  # a parameter id
    assert size_pytest(f"{f} -k 'TestTiny and not four'", repo).devices == 2
    assert size_pytest(f"{f} -k 'one or world'", repo).devices == 2
    s = size_pytest(f"{f} -k 'and or ('", repo)
    assert any("could not be read" in n for n in s.notes)


def test_folders_and_own_cd(repo: Path) -> None:
    s = size_pytest("pytest accuracy/", repo)
    assert s.devices == 16 and s.workdir_rel == "tests/integration/defs"
    s = size_pytest(
        "cd tests/integration/defs && pytest accuracy/test_tiny.py::TestTiny::test_four[tp4]", repo
    )
    assert s.devices == 4 and s.workdir_rel == ""


def test_bench_model_path_is_added_after_each_calls_model_word() -> None:
    from trtllm_script_builder.resolve.commands import add_bench_model_path, word_spans

    assert [w for _, _, w in word_spans('a \'b c\' "d\\"e" f\\ g')] == ["a", "b c", 'd"e', "f g"]
    found = {"org/M": "/models/x y/M"}
    step = 'trtllm-bench -m org/M throughput --dataset "$HOME/d.json"'
    assert add_bench_model_path(step, found) == (
        "trtllm-bench -m org/M --model_path '/models/x y/M' throughput --dataset \"$HOME/d.json\""
    )
    assert add_bench_model_path("trtllm-bench --model='org/M' latency", found) == (
        "trtllm-bench --model='org/M' --model_path '/models/x y/M' latency"
    )
    # a call with its own --model_path, or another model, is left alone
    kept = "trtllm-bench --model org/M --model_path /ckpt throughput"
    assert add_bench_model_path(kept, found) == kept
    assert add_bench_model_path("trtllm-bench -m org/N latency", found) == (
        "trtllm-bench -m org/N latency"
    )
    two = "trtllm-bench -m org/M a; trtllm-bench --model org/M b"
    assert add_bench_model_path(two, {"org/M": "/m"}) == (
        "trtllm-bench -m org/M --model_path /m a; trtllm-bench --model org/M --model_path /m b"
    )

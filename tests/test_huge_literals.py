"""A test file read for sizing may hold an integer no decimal string can carry (Python converts
at most 4,300 digits): `build` refuses it with one line, never a traceback. A decimal literal
fails in the parser; a hexadecimal one parses, and failed later, where the value was shown."""

from __future__ import annotations

import pytest

from .conftest import Env

HUGE = "0x" + "f" * 5000  # about 6,000 decimal digits


@pytest.mark.parametrize(
    ("body", "test_id"),
    [
        (f"@pytest.mark.parametrize('n', [{HUGE}, 2])\ndef test_a(n):\n    pass\n", "test_a[2]"),
        (f"@pytest.mark.skip_less_device({HUGE})\ndef test_a():\n    pass\n", "test_a"),
        (f"N = {HUGE}\n\n@pytest.mark.skip_less_device(N)\ndef test_a():\n    pass\n", "test_a"),
    ],
)
def test_a_huge_integer_in_a_test_file_is_refused_in_one_line(
    cli, env: Env, body: str, test_id: str
) -> None:
    f = env.repo / "tests" / "integration" / "defs" / "accuracy" / "test_huge.py"
    f.write_text("import pytest\n\n\n" + body)
    req = env.request(test_cmd=f"pytest accuracy/test_huge.py::{test_id}")
    r = cli([], req)
    assert r.code == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: test_cmd: ") and "4300 digits" in line, line
    assert "test_huge.py" in line

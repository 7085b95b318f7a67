"""One definition of each limit and count (artifact/limits.py, artifact/cost.py, artifact.measure.floor_ms): the
sources define each name once, and no module writes the numbers again as literals."""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("artifact", "kernels", "baselines", "sweeps", "tools", "plots")

# name -> the one module that defines it
ONE_DEFINITION = {
    "CUDA_GRID_YZ_MAX": "artifact/limits.py", "DEFAULT_TOLERANCE": "artifact/limits.py",
    "grid_reason": "artifact/limits.py", "memory_reason": "artifact/limits.py",
    "device_free_bytes": "artifact/limits.py", "floor_ms": "artifact/measure.py",
    "token_input_bytes": "artifact/cost.py", "fullstate_token_flops": "artifact/cost.py",
}


def _sources():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text()


def definitions(sources) -> dict[str, set[str]]:
    """name -> modules with a top-level or class-level `def name` or `name = ...` (an import is not one)."""
    found: dict[str, set[str]] = {n: set() for n in ONE_DEFINITION}
    for rel, text in sources:
        for name in ONE_DEFINITION:
            if re.search(rf"^\s*(def {name}\b|{name}\s*(:[^=]*)?=[^=])", text, re.M):
                found[name].add(rel)
    return found


def test_each_limit_and_count_is_defined_once():
    found = definitions(_sources())
    assert found == {n: {m} for n, m in ONE_DEFINITION.items()}


def test_a_second_definition_is_caught():
    planted = [("baselines/_common.py", "CUDA_GRID_YZ_MAX = 65535\n"), ("artifact/limits.py", "CUDA_GRID_YZ_MAX = 1\n")]
    assert definitions(planted)["CUDA_GRID_YZ_MAX"] == {"baselines/_common.py", "artifact/limits.py"}


@pytest.mark.parametrize("literal", [r"4\.88e-0?4", r"65535", r"65_535"])
def test_no_module_writes_the_numbers_again(literal):
    """Outside artifact/limits.py the numbers appear only in text (docstrings, comments, messages)."""
    hits = [rel for rel, text in _sources()
            if rel != "artifact/limits.py" and re.search(rf"^{literal}$", _code_only(text), re.M)]
    assert hits == []


def test_a_literal_in_code_is_caught_and_one_in_text_is_not():
    assert re.search(r"^65535$", _code_only("X = 65535  # CUDA's 65535\n"), re.M)
    assert not re.search(r"^65535$", _code_only('"""at most 65535"""\nprint(f"{n} > 65535")\n'), re.M)


def _code_only(text: str) -> str:
    """The source's tokens one per line, string literals (docstrings, f-string text) and comments left out."""
    skip = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", -1)}
    return "\n".join(t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in skip)


def test_the_gate_the_plots_count_within_is_the_runs_default():
    from artifact import limits, measure
    from plots import data
    assert measure.DEFAULT_TOLERANCE is limits.DEFAULT_TOLERANCE and data.PRIMARY_GATE is limits.DEFAULT_TOLERANCE

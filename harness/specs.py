"""Spec lines and spec files: `m: [..]; n: [..]; k: [..]; g: G; seed: S`, one case a line.

parse_spec turns a line into a dict; a line that is not `key: value; ...`, gives a key
twice or a seed outside 0..SEED_MAX does not parse (SpecFileError, exit status 113, before
any case runs). spec_problem says what keeps generate_input from building a parsed case:
that case fails, the others run. Protocol mode reads a spec file strictly (every line a
case, as the leaderboard's eval); human mode skips blank and `#` lines and also takes spec
lines on the command line, and task.yml's cases when given none."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from harness.text import _plural

HERE = Path(__file__).resolve().parents[1]  # the repository root, where task.yml is
SF_VEC_SIZE = 16  # one E4M3 scale per 16 K values
SPEC_FIELDS = ("m", "n", "k", "g", "seed")
# Seeds that set_seed takes (numpy's legacy seeding): --seed, POPCORN_SEED and a spec's seed
SEED_MAX = 2**32 - 1
SEED_RANGE = f"an integer from 0 to {SEED_MAX}"


@dataclasses.dataclass
class TestCase:
    args: dict
    spec: str


class SpecFileError(Exception):
    """A spec file that cannot be read, or a line that does not parse (exit status 113)."""


def _combine(a: int, b: int) -> int:
    # Cantor pairing: a large secret seed gives a large combined seed.
    return int(a + (a + b) * (a + b + 1) // 2)


_SPEC_PART = r"\s*([a-zA-Z_]+)\s*:\s*(\[[^\]]*\]|\([^)]*\)|[a-zA-Z_]+|[+-]?[0-9]+)\s*"


def parse_spec(line: str) -> dict:
    """`m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111` -> dict.

    Raises ValueError on a part that is not `key: value`, a key given twice and an integer
    seed outside 0..SEED_MAX. A value that is neither an integer nor a list of integers
    stays a string; spec_problem says what is wrong with it.
    """
    case = {}
    for part in line.split(";"):
        matched = re.fullmatch(_SPEC_PART, part)
        if not matched:
            raise ValueError(f"invalid test case: '{line}': '{part}' is not `key: value`")
        key, val = matched[1], matched[2]
        if key in case:
            raise ValueError(f"invalid test case: '{line}': key '{key}' is given twice")
        try:
            val = int(val)
        except ValueError:
            if val[:1] in "([" and val[-1:] in ")]":
                inner = val[1:-1].strip()
                try:
                    val = tuple(int(x.strip()) for x in inner.split(",")) if inner else ()
                except ValueError:
                    pass
        if key == "seed" and _is_int(val) and not 0 <= val <= SEED_MAX:
            raise ValueError(
                f"invalid test case: '{line}': field 'seed': expected {SEED_RANGE}, got {val}"
            )
        case[key] = val
    return case


def spec_line(case: dict) -> str:
    def fmt(v):
        return "[" + ", ".join(str(x) for x in v) + "]" if isinstance(v, (list, tuple)) else str(v)

    return "; ".join(f"{k}: {fmt(v)}" for k, v in case.items())


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def spec_problem(args: dict) -> str:
    """What keeps generate_input from building this case, or "" when nothing does.

    Messages name the field (and the group), as custom_kernel's ValueErrors do. M = 0 and
    N = 0 are legal empty groups.
    """
    missing = [f"'{f}'" for f in SPEC_FIELDS if f not in args]
    if missing:
        return f"missing {'field' if len(missing) == 1 else 'fields'} {', '.join(missing)}"
    unknown = [f"'{f}'" for f in args if f not in SPEC_FIELDS]
    if unknown:
        return f"unknown {'field' if len(unknown) == 1 else 'fields'} {', '.join(unknown)}"
    for field in ("g", "seed"):
        if not _is_int(args[field]):
            return f"field '{field}': expected an integer, got {args[field]!r}"
    g = args["g"]
    if g < 1:
        return f"field 'g': g = {g}; a case has at least one group"
    for field in ("m", "n", "k"):
        sizes = args[field]
        if not isinstance(sizes, (tuple, list)) or not all(_is_int(s) for s in sizes):
            return f"field '{field}': expected a list of {_plural(g, 'integer')}, got {sizes!r}"
        if len(sizes) != g:
            return f"field '{field}': {_plural(len(sizes), 'size')}, but g = {g}"
    for group, (m, n, k) in enumerate(zip(args["m"], args["n"], args["k"])):
        for field, size in (("m", m), ("n", n)):
            if size < 0:
                return f"group {group}: field '{field}': {field.upper()} = {size} is negative"
        if k <= 0 or k % SF_VEC_SIZE:
            return f"group {group}: field 'k': K = {k} is not a positive multiple of {SF_VEC_SIZE}"
    return ""


def _skipped_line(line: str) -> bool:
    """A blank line or a `#` comment line, which human mode skips in a spec file."""
    return not line.strip() or line.lstrip().startswith("#")


def read_spec_file(file_name: str, strict: bool = True) -> list[TestCase]:
    """The cases of a spec file, one a line; SpecFileError names the file and the line.

    strict (protocol mode): the leaderboard's format, where every line is a case and a
    blank or comment line does not parse. Otherwise blank lines and lines starting with
    `#` are skipped."""
    try:
        content = Path(file_name).read_text()
    except Exception as e:
        raise SpecFileError(f"Could not open test file `{file_name}`: {e}") from None
    tests = []
    for number, line in enumerate(content.splitlines(), 1):
        if _skipped_line(line):
            if not strict:
                continue
            raise SpecFileError(
                f"{file_name}, line {number}: invalid test case: '{line}': the leaderboard's "
                "spec files have one case on every line (no blank or # lines; human mode "
                "skips them)"
            )
        try:
            tests.append(TestCase(spec=line, args=parse_spec(line)))
        except ValueError as e:
            raise SpecFileError(f"{file_name}, line {number}: {e}") from None
    if not tests:
        raise SpecFileError(f"{file_name} holds no cases: a spec file has one case a line")
    return tests


def _apply_secret_seed(tests: list[TestCase], seed: int | None) -> list[TestCase]:
    if seed is not None:
        for test in tests:
            if _is_int(test.args.get("seed")):
                test.args["seed"] = _combine(test.args["seed"], seed)
    return tests


class InputError(Exception):
    """An argument or environment variable that eval.py does not take (exit status 2): the
    message names it and what is allowed."""


def seed_value(text: str, name: str) -> int:
    """A seed given as text (--seed, POPCORN_SEED): InputError naming `name` unless it is
    an integer in 0..SEED_MAX, which set_seed takes."""
    try:
        seed = int(text)
    except ValueError:
        seed = None
    if seed is None or not 0 <= seed <= SEED_MAX:
        raise InputError(f"{name}={text!r}: expected {SEED_RANGE}")
    return seed


def load_task_cases(kind: str, task_file: Path = HERE / "task.yml") -> list[TestCase]:
    """task.yml's `tests` or `benchmarks` as TestCases."""
    import yaml

    if kind not in ("tests", "benchmarks"):
        raise ValueError(f"load_task_cases: kind {kind!r}, expected 'tests' or 'benchmarks'")
    doc = yaml.safe_load(task_file.read_text())
    cases = []
    for entry in doc[kind]:
        args = {k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()}
        cases.append(TestCase(args=args, spec=spec_line(args)))
    return cases


def _is_file(name: str) -> bool:
    """Whether name is a file; False for a name the system cannot take as a path (a spec
    line of 17+ groups is longer than a file name may be: ENAMETOOLONG)."""
    try:
        return Path(name).is_file()
    except (OSError, ValueError):  # ValueError: a NUL byte
        return False


def human_cases(specs: list[str], mode: str) -> list[TestCase]:
    """The cases of the command line's spec files and spec lines, in order; task.yml's
    tests or benchmarks when there are none. SpecFileError when one does not parse."""
    if not specs:
        return load_task_cases("tests" if mode == "test" else "benchmarks")
    tests = []
    for spec in specs:
        if _is_file(spec):
            tests += read_spec_file(spec, strict=False)
        elif ":" not in spec:
            raise SpecFileError(
                f"'{spec}' is neither a spec file nor a spec line `key: value; ...`"
            )
        else:
            try:
                tests.append(TestCase(args=parse_spec(spec), spec=spec))
            except ValueError as e:
                raise SpecFileError(str(e)) from None
    return tests

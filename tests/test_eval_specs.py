"""eval.py's spec handling in-process: what makes a spec invalid, and the message for it."""

import pytest
import torch

import eval as eval_cli
import reference
from harness import ceilings, report, runs, specs, text, worker

# (id, spec, the error it gets; None: a legal case)
SPEC_CASES = [
    ("empty_m", "m: [0]; n: [64]; k: [128]; g: 1; seed: 1", None),
    ("empty_n", "m: [32]; n: [0]; k: [64]; g: 1; seed: 2", None),
    ("empty_and_full_groups", "m: [0, 32]; n: [64, 16]; k: [128, 64]; g: 2; seed: 3", None),
    (
        "g_longer_than_lists",
        "m: [32]; n: [64]; k: [128]; g: 2; seed: 1",
        "field 'm': 1 size, but g = 2",
    ),
    ("no_g_no_seed", "m: [32]; n: [64]; k: [128]", "missing fields 'g', 'seed'"),
    (
        "negative_m",
        "m: [-1]; n: [64]; k: [128]; g: 1; seed: 1",
        "group 0: field 'm': M = -1 is negative",
    ),
    (
        "negative_n",
        "m: [16, 16]; n: [64, -2]; k: [64, 64]; g: 2; seed: 1",
        "group 1: field 'n': N = -2 is negative",
    ),
    (
        "string_size",
        'm: ["x"]; n: [64]; k: [128]; g: 1; seed: 1',
        "field 'm': expected a list of 1 integer, got",
    ),
    (
        "scalar_size",
        "m: 32; n: [64]; k: [128]; g: 1; seed: 1",
        "field 'm': expected a list of 1 integer, got 32",
    ),
    (
        "k_not_multiple_of_16",
        "m: [32]; n: [64]; k: [200]; g: 1; seed: 1",
        "group 0: field 'k': K = 200 is not a positive multiple of 16",
    ),
    (
        "k_zero",
        "m: [32]; n: [64]; k: [0]; g: 1; seed: 1",
        "group 0: field 'k': K = 0 is not a positive multiple of 16",
    ),
    (
        "g_zero",
        "m: []; n: []; k: []; g: 0; seed: 1",
        "field 'g': g = 0; a case has at least one group",
    ),
    (
        "word_seed",
        "m: [32]; n: [64]; k: [128]; g: 1; seed: abc",
        "field 'seed': expected an integer, got 'abc'",
    ),
    ("unknown_field", "m: [32]; n: [64]; k: [128]; g: 1; seed: 1; l: 2", "unknown field 'l'"),
]


@pytest.mark.parametrize(
    ("spec", "error"), [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES]
)
def test_spec_problem_names_field_and_group(spec, error):
    problem = specs.spec_problem(specs.parse_spec(spec))
    if error is None:
        assert problem == ""
    else:
        assert problem.startswith(error), problem


def test_legal_specs_build_inputs():
    """What spec_problem lets through, generate_input builds (empty groups included)."""
    built = 0
    for _, spec, error in SPEC_CASES:
        if error is None:
            args = specs.parse_spec(spec)
            abc, sf, sfr, sizes = reference.generate_input(**args)
            assert len(abc) == len(sf) == len(sfr) == len(sizes) == args["g"]
            for (a, b, c), (m, n, k, l) in zip(abc, sizes):
                assert l == 1
                assert tuple(a.shape) == (m, k // 2, 1) and tuple(b.shape) == (n, k // 2, 1)
                assert tuple(c.shape) == (m, n, 1)
            assert [s[:3] for s in sizes] == list(zip(args["m"], args["n"], args["k"]))
            built += 1
    assert built >= 3


def test_unparsable_spec_file_names_file_and_line(tmp_path):
    path = tmp_path / "specs.txt"
    path.write_text("m: [32]; n: [64]; k: [128]; g: 1; seed: 1\ngarbage\n")
    with pytest.raises(
        specs.SpecFileError, match=r"specs.txt, line 2: invalid test case: 'garbage'"
    ):
        specs.read_spec_file(str(path))
    with pytest.raises(specs.SpecFileError, match="Could not open test file"):
        specs.read_spec_file(str(tmp_path / "missing.txt"))


def test_command_line_specs_files_and_lines(tmp_path):
    path = tmp_path / "specs.txt"
    path.write_text(
        "m: [32]; n: [64]; k: [128]; g: 1; seed: 1\nm: [16]; n: [16]; k: [64]; g: 1; seed: 2\n"
    )
    tests = specs.human_cases(["m: [0]; n: [64]; k: [64]; g: 1; seed: 3", str(path)], "test")
    assert [t.args["m"] for t in tests] == [(0,), (32,), (16,)]
    with pytest.raises(specs.SpecFileError, match="neither a spec file nor a spec line"):
        specs.human_cases(["garbage"], "test")
    with pytest.raises(specs.SpecFileError, match="invalid test case"):
        specs.human_cases(["m: [1]; n = 3"], "test")


def test_options_and_specs_in_any_order():
    parse = eval_cli.parse_command_line
    args = parse(["benchmark", "--baselines", "specs.txt", "--report", "out", "more.txt"])
    assert args.mode == "benchmark" and args.baselines and args.report == "out"
    assert args.specs == ["specs.txt", "more.txt"]
    args = parse(["--traceback", "test", "m: [1]; n: [16]; k: [64]; g: 1; seed: 1"])
    assert args.mode == "test" and args.traceback and len(args.specs) == 1
    args = parse(["leaderboard"])  # spec files and lines are optional
    assert args.mode == "leaderboard" and args.specs == []


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        ([], "eval.py: error: a mode is required: test, benchmark, leaderboard or profile"),
        (["bench"], "eval.py: error: unknown mode 'bench': choose test, benchmark,"),
        (["test", "--bogus"], "eval.py: error: unrecognized arguments: --bogus"),
        (
            ["test", "--seed", "x"],
            "eval.py: error: argument --seed: expected an integer from 0 to 4294967295, got 'x'",
        ),
    ],
)
def test_wrong_command_lines_get_one_line_and_2(argv, error, capsys):
    assert eval_cli.human_main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1 and captured.err.startswith(error)
    assert "required: mode, specs" not in captured.err


def test_help_states_modes_specs_and_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        eval_cli.human_main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(
        "usage: python eval.py {test,benchmark,leaderboard,profile} [SPECFILE | SPEC ...]"
    )
    for mode in eval_cli.MODES:
        assert f"\n  {mode} " in text
    for option in ("--baselines", "--report DIR", "--json FILE", "--seed N", "--traceback"):
        assert option in text
    assert "POPCORN_FD=N" in text and "EVAL_TIMEOUT_S" in text and "130 interrupted" in text
    assert all(len(line) <= 100 for line in text.splitlines())


def test_human_spec_files_skip_blank_and_comment_lines(tmp_path):
    """A trailing blank line, blank lines between cases and `#` lines: skipped in human
    mode, line numbers still the file's; the protocol mode keeps the leaderboard's format,
    where each of them fails the file (113) with the line named."""
    path = tmp_path / "specs.txt"
    path.write_text(
        "# small cases\n\nm: [32]; n: [64]; k: [128]; g: 1; seed: 1\n   \n"
        "  # one more\nm: [16]; n: [16]; k: [64]; g: 1; seed: 2\ngarbage\n\n"
    )
    with pytest.raises(specs.SpecFileError, match=r"specs.txt, line 7: invalid test case"):
        specs.human_cases([str(path)], "test")
    path.write_text(path.read_text().replace("garbage\n", ""))
    tests = specs.human_cases([str(path)], "test")
    assert [t.args["m"] for t in tests] == [(32,), (16,)]
    with pytest.raises(specs.SpecFileError, match=r"specs.txt, line 1: invalid test case: '#"):
        specs.read_spec_file(str(path))
    path.write_text("m: [32]; n: [64]; k: [128]; g: 1; seed: 1\n\n")
    with pytest.raises(specs.SpecFileError, match=r"line 2: invalid test case: '': .*no blank"):
        specs.read_spec_file(str(path))


def test_shipped_example_spec_file_is_strict_and_valid():
    """specs/example.txt, which the README's protocol example uses: every line a case in
    the leaderboard's format, each one generate_input can build, small enough for a CPU."""
    tests = specs.read_spec_file(str(specs.HERE / "specs" / "example.txt"))
    assert len(tests) >= 2
    for test in tests:
        assert specs.spec_problem(test.args) == ""
        assert ceilings.flops_of(test.args) < 1e9


def test_secret_seed_leaves_a_word_seed_for_the_spec_check():
    tests = specs._apply_secret_seed([specs.TestCase({"seed": "abc"}, "")], 99)
    assert tests[0].args["seed"] == "abc"


def test_plural():
    assert text._plural(1, "test") == "1 test"
    assert text._plural(2, "test") == "2 tests"
    assert text._plural(0, "benchmark") == "0 benchmarks"


def test_worst_mismatch_skips_empty_groups():
    empty = torch.zeros(0, 64, 1, dtype=torch.float16)
    full = torch.ones(2, 3, 1, dtype=torch.float16)
    off = full.clone()
    off[1, 2, 0] = 1.5
    assert runs.worst_mismatch([empty], [empty])["group"] is None
    worst = runs.worst_mismatch([empty, off], [empty, full])
    assert worst["group"] == 1 and worst["index"] == (1, 2, 0) and worst["got"] == 1.5
    assert report._worst_text(runs.worst_mismatch([empty], [empty])).startswith("no elements")


def test_errors_are_one_line():
    assert text.one_line("first\n  second\n\nthird") == "first | second | third"
    error = worker._guarded(int, ("x",), False)
    assert isinstance(error, worker.CaseError)
    assert error.message.startswith("ValueError: invalid literal")


def test_case_labels_stay_readable():
    """Up to 8 groups a label lists every M (the leaderboard's shapes read as before); more
    read as a range and a total, so a 64-group case does not widen the table by 300
    characters."""
    eight = {"m": (80, 176, 128, 72, 64, 248, 96, 160), "n": (4096,) * 8, "k": (7168,) * 8, "g": 8}
    assert report._short_spec(eight) == "G=8 M=[80,176,128,72,64,248,96,160] N=4096 K=7168"
    many = {"m": tuple(range(1, 65)), "n": (2048,) * 64, "k": (2048,) * 32 + (7168,) * 32, "g": 64}
    assert report._short_spec(many) == "G=64 M=1..64 (sum 2080) N=2048 K=2048/7168"

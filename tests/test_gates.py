"""The leaderboard service's submission gates (tools/check_submission.py) on the shipped
submission.py, and each gate shown to refuse what the service refuses."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import check_submission as gates  # noqa: E402

HEADER = "\n".join(gates.HEADER_LINES) + "\n"
PLAIN = HEADER + "import torch\n\n\ndef custom_kernel(data):\n    return [abc[2] for abc in data[0]]\n"


def test_the_shipped_submission_passes_every_gate():
    problems, result = gates.check(ROOT / "submission.py")
    assert problems == [], problems
    assert result["classification"] in gates.ACCEPTED_CLASSES and not result["should_filter"]


def test_the_word_filter_refuses_the_word_in_any_case_anywhere():
    for text in (PLAIN + "# a STREAM in a comment\n", PLAIN + "x = 'Streams'\n", PLAIN + "def upstream(): pass\n"):
        _, problems = gates.text_gates(text.encode())
        assert any("contains 'stream'" in p for p in problems), text
    assert gates.text_gates(PLAIN.encode())[1] == []


def test_size_encoding_and_header_gates():
    assert any("over the service's limit" in p for p in gates.text_gates((PLAIN + "#" * 1_000_000).encode())[1])
    text, problems = gates.text_gates(PLAIN.encode() + b"\xff\xfe")
    assert text is None and any("not UTF-8" in p for p in problems)
    assert any("#!POPCORN gpu B200" in p for p in gates.text_gates(PLAIN.replace("#!POPCORN gpu B200\n", "").encode())[1])
    assert gates.text_gates(b"")[1][0] == "the file is empty"


def test_kernelguard_refuses_generated_code_execution():
    """What the call-key generator used to do: exec of compiled generated source."""
    bad = PLAIN + ("\n\ndef make(n):\n    src = 'def f(x):\\n    return x\\n'\n    ns = {}\n"
                   "    exec(compile(src, '<gen>', 'exec'), ns)\n    return ns['f']\n")
    problems = gates.kernelguard_problems(gates.kernelguard_result(bad))
    assert any("DYNAMIC_EXECUTION" in p or "OBFUSCATED_EXEC" in p or "filters it" in p for p in problems), problems


@pytest.mark.parametrize("result, refused", [
    ({"classification": "low_confidence", "should_filter": False,
      "matched_patterns": [{"pattern": "SCALED_MM_REF", "severity": "high"}]}, False),
    ({"classification": "suspicious", "should_filter": False, "matched_patterns": []}, True),
    ({"classification": "valid", "should_filter": True, "filter_reason": "x", "matched_patterns": []}, True),
    ({"classification": "valid", "should_filter": False,
      "matched_patterns": [{"pattern": "TIMER_PATCH", "severity": "critical"}]}, True),
])
def test_kernelguard_verdicts(result, refused):
    assert bool(gates.kernelguard_problems(result)) is refused

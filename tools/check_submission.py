"""The leaderboard service's own checks on a submission file, applied here before submitting.

    python tools/check_submission.py [submission.py]      (or: ./dev check)

What gpu-mode/kernelbot does with an uploaded file before anything runs:
  - src/kernelbot/api/api_utils.py (popcorn-cli's path; the Discord cog does the same):
    refuses an empty file, more than 1,000,000 bytes, text that is not UTF-8, and any text
    that contains "stream" in any case ("Your code contains work on another stream").
  - src/libkernelbot/kernelguard.py: on benchmark, leaderboard, profile and private runs,
    pipes the text to `kernelguard --api-mode` (the service pins kernelguard 0.3.1) and
    refuses it when the JSON says should_filter.
  - popcorn-cli reads the `#!POPCORN leaderboard ...` and `#!POPCORN gpu ...` lines to
    know where to submit.
This file is stricter than the service on KernelGuard: besides should_filter, it fails a
classification other than valid, low_confidence or default_reference, and any critical or
high pattern but SCALED_MM_REF (the torch._scaled_mm fallback the task allows).
Exit status 0 when every gate passes, 1 otherwise, 2 when the file cannot be read or
KernelGuard cannot run (one line on stderr saying which).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

FORBIDDEN_WORD = "stream"
MAX_BYTES = 1_000_000
HEADER_LINES = ("#!POPCORN leaderboard nvfp4_group_gemm", "#!POPCORN gpu B200")
ACCEPTED_CLASSES = frozenset({"valid", "low_confidence", "default_reference"})
ACCEPTED_SEVERE_PATTERNS = frozenset({"SCALED_MM_REF"})
KERNELGUARD_TIMEOUT_S = 120  # the service allows 30 s on its host; the CI CPU is slower


def text_gates(raw: bytes) -> tuple[str | None, list[str]]:
    """(the text, or None where it is not UTF-8; what the service's upload checks refuse)."""
    problems = []
    if not raw:
        problems.append("the file is empty")
    if len(raw) > MAX_BYTES:
        problems.append(f"{len(raw)} bytes, over the service's limit of {MAX_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, [*problems, f"not UTF-8 ({e})"]
    lowered = text.lower()
    if FORBIDDEN_WORD in lowered:
        lines = [i for i, line in enumerate(text.splitlines(), 1) if FORBIDDEN_WORD in line.lower()]
        problems.append(f"contains '{FORBIDDEN_WORD}' {lowered.count(FORBIDDEN_WORD)} times "
                        f"(lines {', '.join(map(str, lines[:10]))}{', ...' if len(lines) > 10 else ''}); "
                        "the service refuses any occurrence, in any case")
    first = text.splitlines()[:len(HEADER_LINES)]
    for want in HEADER_LINES:
        if want not in first:
            problems.append(f"the first lines do not hold {want!r}")
    return text, problems


def kernelguard_command() -> list[str]:
    """The kernelguard console script of this Python's environment, else the one on PATH."""
    beside = Path(sys.executable).with_name("kernelguard")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("kernelguard")
    if found is None:
        raise RuntimeError("kernelguard is not installed (pip install 'kernelguard==0.3.1', "
                                "a dev dependency of this project)")
    return [found]


def kernelguard_result(text: str) -> dict:
    """KernelGuard's JSON verdict on `text`, as the service runs it (--api-mode, text on stdin,
    the last non-empty line of stdout)."""
    proc = subprocess.run([*kernelguard_command(), "--api-mode"], input=text, text=True,
                          capture_output=True, timeout=KERNELGUARD_TIMEOUT_S, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"kernelguard failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    return json.loads(lines[-1])


def kernelguard_problems(result: dict) -> list[str]:
    problems = []
    if result.get("should_filter"):
        problems.append(f"KernelGuard filters it ({result.get('filter_reason')}); the service refuses it")
    classification = result.get("classification")
    if classification not in ACCEPTED_CLASSES:
        problems.append(f"KernelGuard classifies it {classification!r}")
    for item in result.get("matched_patterns", []):
        if item.get("severity") in ("critical", "high") and item.get("pattern") not in ACCEPTED_SEVERE_PATTERNS:
            problems.append(f"KernelGuard pattern {item.get('pattern')} ({item.get('severity')}): "
                            f"{item.get('evidence')}")
    return problems


def check(path: Path) -> tuple[list[str], dict | None]:
    """(every gate the file fails, KernelGuard's verdict or None where it did not run)."""
    text, problems = text_gates(path.read_bytes())
    if text is None:
        return problems, None
    result = kernelguard_result(text)
    return problems + kernelguard_problems(result), result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tools/check_submission.py",
        description="The leaderboard service's gates (word filter, size, UTF-8, #!POPCORN "
                    "header, KernelGuard) on a submission file.")
    parser.add_argument("file", nargs="?", default="submission.py",
                        help="the file to check (default: submission.py)")
    path = Path(parser.parse_args(argv).file)
    try:
        problems, result = check(path)
    except OSError as e:
        print(f"{parser.prog}: {path}: cannot read it ({e.strerror or e})", file=sys.stderr)
        return 2
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"{parser.prog}: {path}: {e}", file=sys.stderr)
        return 2
    if result is not None:
        patterns = ", ".join(f"{p['pattern']} ({p['severity']})" for p in result.get("matched_patterns", []))
        print(f"KernelGuard: {result.get('classification')}, should_filter {result.get('should_filter')}; "
              f"patterns: {patterns or 'none'}")
    if problems:
        print(f"{path}: {len(problems)} gate(s) fail:")
        for p in problems:
            print(f"  - {p}")
        return 1
    print(f"{path}: passes the leaderboard service's gates ({path.stat().st_size} bytes, UTF-8, "
          f"no forbidden word, POPCORN header, KernelGuard)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

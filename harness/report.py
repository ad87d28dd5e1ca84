"""What a run shows: case labels, the machine, the tests' and the benchmarks' tables, the
Markdown report and its chart (--report), and the check that --report and --json can be
written before a run starts."""

from __future__ import annotations

import argparse
import errno
import math
import os
import re
import tempfile
from pathlib import Path

import torch

from harness.baselines import EXACT_PATH_BASELINE, _below_roofline_notes
from harness.ceilings import Roofline, _roofline_text
from harness.runs import RTOL
from harness.specs import InputError, TestCase, spec_problem
from harness.text import _rate, _table

SHORT_SPEC_MAX_MS = 8  # groups whose every M a case's label lists; more read as a range


def _short_spec(args: dict) -> str:
    """A case's label: G, every group's M (or their range and total past SHORT_SPEC_MAX_MS
    groups, which would make a table too wide to read), the distinct N and K."""
    if len(args["m"]) <= SHORT_SPEC_MAX_MS:
        ms = "[" + ",".join(str(m) for m in args["m"]) + "]"
    else:
        ms = f"{min(args['m'])}..{max(args['m'])} (sum {sum(args['m'])})"
    ns, ks = sorted(set(args["n"])), sorted(set(args["k"]))
    n = ns[0] if len(ns) == 1 else "/".join(map(str, ns))
    k = ks[0] if len(ks) == 1 else "/".join(map(str, ks))
    return f"G={args['g']} M={ms} N={n} K={k}"


def _case_label(test: TestCase) -> str:
    """The short form of a valid case, the spec as written otherwise."""
    return test.spec if spec_problem(test.args) else _short_spec(test.args)


def _device_name() -> str | None:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo, else platform), or ""."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    import platform

    return platform.processor()


def _machine_line() -> str:
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        where = f"{torch.cuda.get_device_name()} (sm_{major}{minor})"
    else:
        model = _cpu_model()
        where = f"CPU only ({model + ', ' if model else ''}{os.cpu_count()} cores)"
    return f"{where}, torch {torch.__version__}"


def _worst_text(worst: dict | None) -> str:
    if worst is None:
        return "-"
    if worst["group"] is None:
        return "no elements (every group is empty)"
    if worst["ratio"] == 0:
        return "0 (bit-identical to the reference)"
    index = list(worst["index"])
    where = f"g{worst['group']}{index}"
    return f"{worst['ratio']:.3f}x tol at {where}: {worst['got']:.4g} vs {worst['expected']:.4g}"


def _print_test_table(rows: list[list[str]], count: int, failed: int) -> None:
    """The tests' table and summary; `count` cases asked for, those in rows done."""
    if not rows:
        return
    print()
    print(_table(["#", "case", "result", "worst |out-ref| / (atol + rtol|ref|)", "ms"], rows))
    not_run = f", {count - len(rows)} not run" if len(rows) < count else ""
    print(f"\n{len(rows) - failed} passed, {failed} failed{not_run} (rtol = atol = {RTOL:g})")


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _sol_headers(sol: str) -> list[str]:
    return {"ratio": ["B200 SOL us", "x SOL"], "figure": ["B200 SOL us"], "none": []}[sol]


def _sol_cells(sol_us: float | None, mean_us: float, sol: str) -> list[str]:
    if sol == "none":
        return []
    if not sol_us:
        return ["-"] * len(_sol_headers(sol))
    cells = [f"{sol_us:.3f}"]
    return cells + [f"{mean_us / sol_us:.2f}"] if sol == "ratio" else cells


def _report_row(r: dict, sol: str, baseline_names: list[str], width: int) -> list[str]:
    if "mean" not in r:
        return [r["case"], "FAIL"] + ["-"] * (width - 2)
    mean_us = r["mean"] / 1e3
    ratio = f"{mean_us / r['roofline_us']:.2f}" if r["roofline_us"] > 0 else "-"
    row = [
        r["case"],
        f"{mean_us:.2f}",
        f"{r['best'] / 1e3:.2f}",
        _rate(r["flops"] / (r["mean"] * 1e-9) / 1e12),
        f"{r['roofline_us']:.2f}",
        ratio,
        r["bound"],
    ]
    row += _sol_cells(r["sol_us"], mean_us, sol)
    for name in baseline_names:
        v = r.get("baselines", {}).get(name)
        row.append(f"{v / 1e3:.1f}" if isinstance(v, (int, float)) else str(v or "-"))
    return row


def benchmark_report(results: list[dict], roof: Roofline, sol: str = "ratio") -> dict:
    """The benchmark table and its summary. sol (see sol_mode): "ratio" shows task.yml's
    B200 speed of light and the ratio to it, "figure" the B200's number alone, "none"
    neither."""
    headers = ["case", "mean us", "best us", "TFLOP/s", "roofline us", "x roofline", "bound"]
    headers += _sol_headers(sol)
    baseline_names = sorted({n for r in results for n in r.get("baselines", {})})
    headers += [f"{n} us" for n in baseline_names]
    rows = [_report_row(r, sol, baseline_names, len(headers)) for r in results]
    # The summary is over the cases that ran and have work to do (a roofline above 0).
    timed = [r for r in results if "mean" in r and r["roofline_us"] > 0]
    means = [r["mean"] / 1e3 for r in timed]
    roofs = [r["roofline_us"] for r in timed]
    sols = [r["sol_us"] for r in timed if r["sol_us"]]
    lines = [_table(headers, rows)] + _below_roofline_notes(results, roof)
    if sol == "none" and EXACT_PATH_BASELINE in baseline_names:
        lines.append(
            f"note: on a CPU the submission runs the exact torch path, so `mean us` and "
            f"`{EXACT_PATH_BASELINE} us` time the same code, each in a fresh worker: they "
            "differ by the run's noise"
        )
    summary = {}
    if means:
        summary = {"geomean_us": _geomean(means), "roofline_geomean_us": _geomean(roofs)}
        ratio = summary["geomean_us"] / summary["roofline_geomean_us"]
        lines.append(
            f"\ngeometric mean: {summary['geomean_us']:.2f} us; roofline geomean "
            f"{summary['roofline_geomean_us']:.2f} us ({ratio:.2f}x)"
        )
        if sol != "none" and len(sols) == len(means):
            summary["sol_geomean_us"] = _geomean(sols)
            if sol == "ratio":
                sol_ratio = f"{summary['geomean_us'] / summary['sol_geomean_us']:.2f}x"
            else:
                sol_ratio = "a B200 figure, no ratio on this GPU"
            lines.append(
                f"B200 speed-of-light geomean {summary['sol_geomean_us']:.2f} us ({sol_ratio})"
            )
    lines.append(
        f"roofline = the larger of FLOPs / peak and bytes / bandwidth: {_roofline_text(roof)}"
    )
    return {"text": "\n".join(lines), "headers": headers, "rows": rows, "summary": summary}


def _plot_label(case: str) -> str:
    """A bar group's label, one field a line so that neighbours never overlap: G, then N
    and K (a case label's last two fields; its M list is in the table)."""
    return "\n".join([case.split(" ")[0], *case.split(" ")[-2:]])


def report_stem(device_name: str | None) -> str:
    """The report's file name without its suffix, naming the device: benchmark-nvidia-h200
    for an "NVIDIA H200", benchmark-cpu without a GPU."""
    slug = re.sub(r"[^a-z0-9]+", "-", (device_name or "cpu").lower()).strip("-")
    return f"benchmark-{slug or 'gpu'}"


MATPLOTLIB_MISSING = (
    "--report draws its chart with matplotlib, which is not installed: "
    'pip install -e ".[report]"'
)


def write_report(
    out_dir: Path,
    results: list[dict],
    roof: Roofline,
    report: dict,
    machine: str | None = None,
    sol: str = "ratio",
    device_name: str | None = None,
) -> list[Path]:
    """The table (.md) and the chart (.png: time vs roofline, and the B200 speed of light
    unless sol is "none", per shape) in out_dir, named for the device (report_stem: the
    GPU's name, or the CPU), and said in them; the paths written."""
    machine = machine or _machine_line()
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / report_stem(device_name)
    title = f"nvfp4_group_gemm benchmark on {device_name or 'the CPU'}"
    md = [f"# {title}\n\nMachine: {machine}\n"]
    md.append("| " + " | ".join(report["headers"]) + " |")
    md.append("|" + "---|" * len(report["headers"]))
    md += ["| " + " | ".join(r) + " |" for r in report["rows"]]
    summary = [
        line
        for line in report["text"].splitlines()
        if line.startswith(("geometric", "B200", "roofline"))
    ]
    md += [""] + summary
    written = [stem.with_suffix(".md")]
    written[0].write_text("\n".join(md) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if "mean" in r]
    if not ok:
        return written
    labels = [_plot_label(r["case"]) for r in ok]
    x = range(len(ok))
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(10.0, 0.95 * len(ok)), 5))
    ax.bar([i - width for i in x], [r["mean"] / 1e3 for r in ok], width, label="measured (mean)")
    ax.bar(
        list(x),
        [r["roofline_us"] for r in ok],
        width,
        label="roofline (max of FLOPs / peak, bytes / bandwidth)",
    )
    if sol != "none":
        ax.bar(
            [i + width for i in x],
            [r["sol_us"] or 0 for r in ok],
            width,
            label="B200 speed of light",
        )
    ax.set_yscale("log")
    ax.set_ylabel("time per call (us, log scale)")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_title(f"nvfp4 grouped GEMM on {machine}", fontsize=10)
    for i, r in enumerate(ok):
        ax.annotate(
            f"{r['mean'] / 1e3:.1f}",
            (i - width, r["mean"] / 1e3),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(stem.with_suffix(".png"))
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written


def _make_file_in(folder: Path) -> None:
    """OSError unless a file can be made in folder (a permission bit, a read-only file
    system or a path through a file: only trying tells them all apart, root included)."""
    with tempfile.TemporaryFile(dir=folder):
        pass


def check_outputs(args: argparse.Namespace) -> None:
    """InputError when --report's directory cannot be made or written to, or --json's file
    cannot be written: said before a run of minutes, not after it. Makes the directory."""
    if args.report:
        folder = Path(args.report)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _make_file_in(folder)
        except OSError as e:
            raise InputError(
                f"--report {args.report}: cannot make this directory or write in it "
                f"({e.strerror or e})"
            ) from None
    if args.json:
        path = Path(args.json)
        try:
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, "it is a directory")
            if path.exists():
                open(path, "a").close()
            else:
                _make_file_in(path.parent)
        except OSError as e:
            raise InputError(
                f"--json {args.json}: cannot write this file ({e.strerror or e}); its "
                "directory must exist and be writable"
            ) from None

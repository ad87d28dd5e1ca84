"""Makes each wait of this GPU's kernel hang on purpose and checks that the watchdog ends it.

    python tools/watchdog_check.py                     # every wait site of this GPU's kernel
    python tools/watchdog_check.py sm90.consumer.full  # one site
    python tools/watchdog_check.py --ms 500            # the deadline (NVFP4_GEMM_WATCHDOG_MS)
    python tools/watchdog_check.py --sanitizer memcheck  # each site's process under compute-sanitizer
    python tools/watchdog_check.py --self-check auto     # the self-check at its default (Hopper: off)
    python tools/watchdog_check.py --many 20             # 20 hangs in one process, then every benchmark

On a Hopper GPU the sites are the Hopper kernel's, on a Blackwell GPU the Blackwell
kernel's (watchdog.WAIT_SITES). For each site a fresh process builds the config that case A
chooses with that site's fault injected (NVFP4_GEMM_INJECT_HANG=SITE:CONFIG: a stage that
expects 16 bytes more than its loads bring, or one arrive left out) and, with the
self-check on (--self-check 1, the default) or at its default setting (--self-check auto:
then it is the guarded first launch of the config that meets the hang):

  1. compiles it (untimed), then times custom_kernel on case A: the call must return the
     exact result within the deadline and the drains' (1 + DRAIN_FACTOR deadlines) plus
     about a second, with one warning that names the injected wait;
  2. calls case A again: the config is retired, the call takes the fallback, or on
     Blackwell the next config that takes it (never the retired one);
  3. calls case B, whose config is another: its kernel still runs on the same device, with
     no warning, and its result is exact.

With --sanitizer TOOL each site's process runs under compute-sanitizer (memcheck or
racecheck: the give-up paths, the notes and the record's writes of a launch that hung);
a site then also needs a clean report, and the time bound of step 1 is off (the tool
slows every launch).

With --many N one process meets N hangs, the sites in turn, each in a fresh runner: every
hung call must return the exact result with one warning and retire its config; then a
runner without a fault runs every benchmark case of task.yml on the same device, and each
result must agree with the reference (rtol = atol = 1e-3): the device is still usable.

One JSON line per site on stdout, then a summary; exit status 0 when every site passed.
A site whose process does not end within --timeout seconds failed (the watchdog did not
end the hang).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (M list, N, K) of the cases: A reaches every wait of its kernel (several K-tiles a CTA,
# more than the stages; K-range pieces on Hopper; a CTA pair on Blackwell), B chooses
# another config
CASES = {
    "sm90": {"A": ([128], 4096, 7168), "B": ([1, 3, 8, 2, 5, 8, 4, 6], 4096, 7168)},
    "sm100": {"A": ([192, 320], 3072, 4096), "B": ([1, 3, 8, 2], 4096, 7168)},
}


def case_data(kernel: str, name: str, seed: int):
    import reference

    m, n, k = CASES[kernel][name]
    return reference.generate_input(m=m, n=[n] * len(m), k=[k] * len(m), g=len(m), seed=seed)


def run_site(site: str, ms: int, timed: bool = True) -> dict:
    """In this process (a fresh one per site): the three steps of the module docstring."""
    import warnings

    import torch

    sys.path.insert(0, str(ROOT))
    import reference
    from nvfp4_gemm import common, dispatch, watchdog
    from nvfp4_gemm.inputs import validate_inputs

    kernel = watchdog.SITE_BY_NAME[site].kernel
    device = torch.device("cuda", torch.cuda.current_device())
    a, b = case_data(kernel, "A", 11), case_data(kernel, "B", 12)
    path = dispatch.select_path(device)
    runner = dispatch.get_runner(device, path)
    config, reason = runner.plan(validate_inputs(a))
    assert config is not None, reason
    name = runner.backend.config_name(config)
    assert runner.inject == (site, name), (runner.inject, name)
    for checked in (False, True):  # both builds, outside the timing
        runner.build(config, runner.watch_settings(config, checked))
    other, _ = runner.plan(validate_inputs(b))

    def call(data):
        common._warned.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = [c.clone() for c in dispatch.custom_kernel(data)]
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
        expected = reference.ref_kernel(([tuple(t.clone() for t in g) for g in data[0]], *data[1:]))
        exact = all(torch.equal(o, e) for o, e in zip(out, expected))
        # this project's warnings (the DSL's deprecation warnings of a compile are not)
        return exact, elapsed, [str(w.message) for w in caught if str(w.message).startswith("nvfp4 grouped GEMM")]

    exact, elapsed, messages = call(a)
    hung = [m for m in messages if " gave up after " in m]
    what = watchdog.SITE_BY_NAME[site]
    named = len(hung) == 1 and what.role in hung[0] and what.what.split("{")[0] in hung[0]
    exact_again, _, messages_again = call(a)
    # the retired config is not launched again: the call falls back, or (on Blackwell) runs
    # the next config that takes it (KernelBackend.alternatives), self-checked
    fallback = (config in runner.rejected and exact_again
                and any("cannot take this call" in m or " is retired (" in m for m in messages_again))
    exact_b, elapsed_b, messages_b = call(b)
    ran_b = other not in runner.rejected and other != config and not messages_b
    return {
        "site": site, "config": name, "other_config": runner.backend.config_name(other),
        "deadline_ms": ms, "elapsed_s": round(elapsed, 3), "exact": exact, "warning": hung[0] if hung else None,
        "warnings": messages, "named": named, "fallback": fallback, "fallback_warnings": messages_again,
        "other_ran": ran_b, "other_exact": exact_b, "other_elapsed_s": round(elapsed_b, 3),
        "passed": bool(exact and named and (elapsed < (1 + watchdog.DRAIN_FACTOR) * ms / 1000 + 1.5 or not timed)
                       and fallback and ran_b and exact_b),
    }


def run_many(count: int, ms: int) -> dict:
    """In this process: `count` hangs, the injectable sites of this GPU's kernel in turn,
    each in a fresh runner (a hang retires its config); then every benchmark case of
    task.yml on a runner without a fault (module docstring)."""
    import warnings

    import torch

    sys.path.insert(0, str(ROOT))
    import reference
    from harness.specs import load_task_cases
    from nvfp4_gemm import common, dispatch, watchdog
    from nvfp4_gemm.inputs import validate_inputs
    from nvfp4_gemm.kernel_runner import GroupedGemmRunner
    from nvfp4_gemm.torch_paths import first_mismatch

    device = torch.device("cuda", torch.cuda.current_device())
    path = dispatch.select_path(device)
    kernel = {"sm90": "sm90", "sm100": "sm100"}[path]
    backend = dispatch._BACKENDS[path]()
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    sites = [s.name for s in watchdog.WAIT_SITES if s.kernel == kernel and s.inject is not None]
    data = case_data(kernel, "A", 11)
    expected = reference.ref_kernel(([tuple(t.clone() for t in g) for g in data[0]], *data[1:]))
    hangs = []
    builds = None  # the runners share their compiles: a build holds no state of a launch
    for i in range(count):
        site = sites[i % len(sites)]
        runner = GroupedGemmRunner(backend, sms, self_check=True, device_index=device.index, watchdog_ms=ms,
                                   inject=(site, None))
        builds = runner.compiled = runner.compiled if builds is None else builds
        problem = validate_inputs(data)
        config, reason = runner.plan(problem)
        common._warned.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            out = [c.clone() for c in runner.run(data, problem, config)]
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
        hung = [str(w.message) for w in caught if " gave up after " in str(w.message)]
        hangs.append({"site": site, "exact": all(torch.equal(o, e) for o, e in zip(out, expected)),
                      "warned": len(hung) == 1, "retired": config in runner.rejected, "elapsed_s": round(elapsed, 3)})
        print(f"hang {i + 1} of {count}: {json.dumps(hangs[-1])}", file=sys.stderr, flush=True)
    healthy = GroupedGemmRunner(backend, sms, self_check=True, device_index=device.index)
    cases = []
    for test in load_task_cases("benchmarks"):
        case = reference.generate_input(**test.args)
        want = reference.ref_kernel(([tuple(t.clone() for t in g) for g in case[0]], *case[1:]))
        problem = validate_inputs(case)
        config, reason = healthy.plan(problem)
        got = healthy.run(case, problem, config) if config is not None else None
        torch.cuda.synchronize()
        wrong = "no config" if got is None else first_mismatch(got, want)
        cases.append({"case": test.args, "config": None if config is None else backend.config_name(config),
                      "ok": wrong is None and config not in healthy.rejected, "why": wrong})
        print(f"benchmark {len(cases)}: {json.dumps(cases[-1])}", file=sys.stderr, flush=True)
    passed = all(h["exact"] and h["warned"] and h["retired"] for h in hangs) and all(c["ok"] for c in cases)
    return {"hangs": hangs, "benchmarks": cases, "passed": passed}


def site_env(site: str, ms: int, self_check: str = "1") -> dict:
    """The environment of a site's process: the fault in case A's config only."""
    sys.path.insert(0, str(ROOT))
    import torch

    from nvfp4_gemm import watchdog
    from nvfp4_gemm.inputs import validate_inputs
    from nvfp4_gemm.kernel_runner import GroupedGemmRunner
    from nvfp4_gemm.sm90 import sm90_backend
    from nvfp4_gemm.sm100 import sm100_backend

    kernel = watchdog.SITE_BY_NAME[site].kernel
    backend = {"sm90": sm90_backend, "sm100": sm100_backend}[kernel]()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    config, reason = GroupedGemmRunner(backend, sms, device_index=0).plan(validate_inputs(case_data(kernel, "A", 11)))
    assert config is not None, reason
    return dict(os.environ, NVFP4_GEMM_INJECT_HANG=f"{site}:{backend.config_name(config)}",
                NVFP4_GEMM_WATCHDOG_MS=str(ms), NVFP4_GEMM_SELF_CHECK=self_check, PYTHONUNBUFFERED="1")


def sanitized(cmd: list[str], tool: str) -> list[str]:
    """cmd under compute-sanitizer's `tool`: exit status 3 on any error or hazard it reports
    (API errors are not reported: the DSL's probes of driver features return some)."""
    return ["compute-sanitizer", "--tool", tool, "--report-api-errors", "no", "--error-exitcode", "3", *cmd]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Needs an sm_90 or sm_100 GPU with the CuTe DSL.")
    ap.add_argument("sites", nargs="*", help="wait sites (default: every site of this GPU's kernel)")
    ap.add_argument("--ms", type=int, default=500, help="the deadline, NVFP4_GEMM_WATCHDOG_MS (default 500)")
    ap.add_argument("--timeout", type=float, default=240, help="seconds a site's process may take")
    ap.add_argument("--sanitizer", choices=("memcheck", "racecheck"),
                    help="run each site's process under compute-sanitizer with this tool")
    ap.add_argument("--self-check", choices=("1", "auto"), default="1",
                    help="NVFP4_GEMM_SELF_CHECK of the sites' processes (default 1; auto: the GPU's default)")
    ap.add_argument("--many", type=int, metavar="N", help="N hangs in this process, then every benchmark case")
    ap.add_argument("--report-dir", type=Path, metavar="DIR",
                    help="write each site's whole output (its sanitizer report included) to DIR/SITE.txt; with "
                         "CUTE_DSL_LINEINFO=1 a sanitizer's report names the kernel's Python source lines")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the per-site process
    args = ap.parse_args()
    if args.many:
        result = run_many(args.many, args.ms)
        print(json.dumps(result))
        print(f"watchdog_check: {sum(h['exact'] and h['warned'] and h['retired'] for h in result['hangs'])} of "
              f"{len(result['hangs'])} hangs ended exactly; {sum(c['ok'] for c in result['benchmarks'])} of "
              f"{len(result['benchmarks'])} benchmark cases right after them")
        return 0 if result["passed"] else 1
    if args.one:
        print(json.dumps(run_site(args.one, args.ms, timed=args.sanitizer is None)))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("watchdog_check: needs a CUDA GPU (Hopper or Blackwell); none here")
        return 2
    sys.path.insert(0, str(ROOT))
    from nvfp4_gemm import watchdog

    major = torch.cuda.get_device_capability()[0]
    kernel = {9: "sm90", 10: "sm100"}.get(major)
    if kernel is None:
        print(f"watchdog_check: no kernel of this project runs on an sm_{major}x GPU")
        return 2
    sites = args.sites or [s.name for s in watchdog.WAIT_SITES if s.kernel == kernel and s.inject is not None]
    results = []
    for site in sites:
        t0 = time.perf_counter()
        try:
            cmd = [sys.executable, __file__, "--one", site, "--ms", str(args.ms)]
            if args.sanitizer:
                cmd = sanitized(cmd, args.sanitizer)
            proc = subprocess.run(cmd, env=site_env(site, args.ms, args.self_check), capture_output=True, text=True,
                                  timeout=args.timeout, cwd=ROOT)
            if args.report_dir:
                args.report_dir.mkdir(parents=True, exist_ok=True)
                (args.report_dir / f"{site}.txt").write_text(proc.stdout + proc.stderr)
            lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
            result = json.loads(lines[-1]) if lines else {
                "site": site, "passed": False, "error": (proc.stderr or proc.stdout)[-2000:]}
            if args.sanitizer:
                report = [x for x in (proc.stdout + proc.stderr).splitlines() if x.startswith("=========")]
                result["sanitizer"] = report[-1] if report else None
                result["sanitizer_rc"] = proc.returncode
                errors = [x for x in report if "ERROR SUMMARY" not in x and "RACECHECK SUMMARY" not in x]
                result["sanitizer_errors"] = errors[:20]
                result["passed"] = bool(result["passed"] and proc.returncode == 0 and report)
        except subprocess.TimeoutExpired:
            result = {"site": site, "passed": False, "error": f"no end within {args.timeout} s: the hang was not ended"}
        result["process_s"] = round(time.perf_counter() - t0, 1)
        results.append(result)
        print(json.dumps(result), flush=True)
    failed = [r["site"] for r in results if not r["passed"]]
    print(f"watchdog_check: {len(results) - len(failed)} of {len(results)} sites passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

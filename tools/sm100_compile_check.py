"""Compile the sm_100a NVFP4 grouped GEMM (and its descriptor-init kernel) on the CPU and
report what the PTX contains, as one JSON line on stdout.

    CUTE_DSL_ARCH=sm_100a CUTE_DSL_KEEP=ptx,cubin CUTE_DSL_DUMP_DIR=DIR \
        python tools/sm100_compile_check.py --config NAME --out DIR [--inject SITE | --masked]

--masked compiles the masked op's kernels instead (nvfp4_gemm/sm100_masked.py: its plan,
descriptor init and GEMM for the config with direct_last_store), reported as "plan",
"init" and "gemm".

--inject builds the config with the watchdog's fault injected at a wait site (watchdog.py's
WAIT_SITES, NVFP4_GEMM_INJECT_HANG). The report includes the watchdog's structure in the
PTX (watchdog_ptx): every mbarrier wait bounded by a read of the global timer, and from
every wait's give-up path a way through the kernel's control flow to tcgen05.dealloc.

Runs under any venv with nvidia-cutlass-dsl (4.5.2 or 4.8.1); no GPU or driver is needed.
The DSL reads CUTE_DSL_* when it is imported, so this script sets defaults for them (from
--out and --arch) before importing the kernel module. Resources come from
`ptxas -v` on the dumped PTX (registers, static shared memory, spill bytes); the dynamic
shared memory is the kernel module's own budget (`sm100_smem_bytes`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from ptx_flow import ptx_cfg  # noqa: E402

BLOCK_SCALE_MMA = re.compile(r"tcgen05\.mma\.cta_group::[12]\.kind::mxf4nvf4\.block_scale")
TMA_STORE = re.compile(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta")
TMA_LOAD = re.compile(
    r"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global|"
    r"cp\.async\.bulk\.tensor\.\dd\.shared::cta\.global|"
    r"cp\.async\.bulk\.tensor\.\dd\.cta_group::2\.shared::cluster\.global"
)


def _load_kernel_module():
    """submission.py, where the kernel lives (imported after CUTE_DSL_* are set)."""
    sys.path.insert(0, str(ROOT))
    import submission

    return submission


def _find_ptxas() -> str | None:
    for cand in (os.environ.get("PTXAS"), "/usr/local/bin/ptxas", shutil.which("ptxas")):
        if cand and Path(cand).exists():
            return cand
    return None


def ptxas_resources(ptx: Path, arch: str) -> dict:
    """Per-entry registers / static smem / spill bytes from `ptxas -v`."""
    ptxas = _find_ptxas()
    if ptxas is None:
        return {"error": "ptxas not found"}
    # DSL 4.5.2 dumps the PTX with a trailing NUL byte, which ptxas rejects
    clean = ptx.with_suffix(".clean.ptx.txt")
    clean.write_bytes(ptx.read_bytes().rstrip(b"\0"))
    proc = subprocess.run(
        [ptxas, "-v", f"-arch={arch}", str(clean), "-o", os.devnull],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-2000:]}
    out: dict = {}
    current = None
    for line in proc.stderr.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
            out[current] = {}
            continue
        if current is None:
            continue
        m = re.search(
            r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line
        )
        if m:
            out[current].update(
                stack_bytes=int(m.group(1)),
                spill_stores=int(m.group(2)),
                spill_loads=int(m.group(3)),
            )
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[current]["registers"] = int(m.group(1))
            sm = re.search(r"(\d+) bytes smem", line)
            out[current]["static_smem"] = int(sm.group(1)) if sm else 0
    return out


def watchdog_ptx(text: str) -> dict:
    """The watchdog in a kernel's PTX: its inline-asm waits (those with a give-up path), how
    many read the global timer, the mbarrier waits outside them, and how many give-up paths
    reach tcgen05.dealloc through the control flow."""
    asm_blocks = re.findall(r"// begin inline asm\s*\n(.*?)// end inline asm", text, re.S)
    waits = [b for b in asm_blocks if "WD_GIVEUP" in b]
    unbounded = sum(1 for b in asm_blocks if re.search(r"mbarrier\.(try|test)_wait", b) and "WD_GIVEUP" not in b)
    items, succ = ptx_cfg(text)
    dealloc = {i for i, (_, stmt) in enumerate(items) if "tcgen05.dealloc" in stmt}
    giveups = [i for i, (label, _) in enumerate(items) if label.endswith(":WD_GIVEUP")]
    reaching = 0
    for start in giveups:
        seen, todo = {start}, [start]
        while todo:
            i = todo.pop()
            if i in dealloc:
                reaching += 1
                break
            for j in succ[i]:
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
    return {
        "bounded_waits": len(waits),
        "bounded_waits_reading_timer": sum(1 for b in waits if "%globaltimer" in b),
        "unbounded_mbarrier_waits": unbounded,
        "giveup_paths": len(giveups),
        "giveup_paths_reaching_dealloc": reaching,
        "traps": len(re.findall(r"\btrap;", text)),
    }


def _count_before_wait(pattern: str, text: str) -> int | None:
    """Occurrences of pattern before the grid dependency wait (None: no wait)."""
    if "griddepcontrol.wait;" not in text:
        return None
    return len(re.findall(pattern, text.split("griddepcontrol.wait;")[0]))


def scan_ptx(ptx: Path) -> dict:
    text = ptx.read_text()
    return {
        "block_scale_mma": len(BLOCK_SCALE_MMA.findall(text)),
        "ld_local": len(re.findall(r"\bld\.local", text)),
        "st_local": len(re.findall(r"\bst\.local", text)),
        "tma_store": len(TMA_STORE.findall(text)),
        # the last tile's direct stores (direct_last_store): 16-byte smem reads, predicated
        # 16-byte global stores
        "ld_shared_v4": len(re.findall(r"\bld\.shared\.v4\.b32", text)),
        "st_global_v4": len(re.findall(r"@p st\.global\.v4\.b32", text)),
        "tma_load": len(TMA_LOAD.findall(text)),
        "tcgen05_alloc": len(re.findall(r"tcgen05\.alloc\.", text)),
        "tcgen05_dealloc": len(re.findall(r"tcgen05\.dealloc\.", text)),
        "tensormap_replace": len(re.findall(r"tensormap\.replace", text)),
        "pdl_wait": len(re.findall(r"griddepcontrol\.wait;", text)),
        # global loads, bulk copies or descriptor prefetches before the grid dependency wait:
        # with programmatic dependent launch they could read what the previous kernel writes
        "global_before_pdl_wait": _count_before_wait(
            r"\bld\.global|cp\.async\.bulk|prefetch\.tensormap", text),
        # L1 prefetches there are safe only of host-written tables (the schedule row, the
        # sizes); L2 prefetches of anything (prefetch_start)
        "l1_prefetch_before_pdl_wait": _count_before_wait(r"\bprefetch\.global\.L1\b", text),
        "l2_prefetch_before_pdl_wait": _count_before_wait(r"\bprefetch\.global\.L2\b", text),
        "watchdog": watchdog_ptx(text),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Runs on the CPU (no GPU); needs the CuTe DSL.")
    ap.add_argument("--config", required=True, help="name in SM100_NAMED_CONFIGS")
    ap.add_argument("--out", required=True, help="dump directory for PTX / cubin")
    ap.add_argument("--arch", default="sm_100a")
    ap.add_argument("--inject", default=None, help="a wait site whose fault the build injects")
    ap.add_argument("--masked", action="store_true",
                    help="the masked op's kernels (nvfp4_gemm/sm100_masked.py) of the config with direct_last_store")
    args = ap.parse_args()

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CUTE_DSL_ARCH", args.arch)
    os.environ.setdefault("CUTE_DSL_KEEP", "ptx,cubin")
    os.environ.setdefault("CUTE_DSL_DUMP_DIR", str(out))
    dump_dir = Path(os.environ["CUTE_DSL_DUMP_DIR"]).resolve()
    before = set(dump_dir.glob("*")) if dump_dir.exists() else set()

    km = _load_kernel_module()
    import cutlass

    cfg = km.SM100_NAMED_CONFIGS[args.config]
    t0 = time.perf_counter()
    if args.masked:
        import dataclasses

        from nvfp4_gemm.sm100_masked import compile_masked_sm100

        cfg = dataclasses.replace(cfg, direct_last_store=True)
        compile_masked_sm100(cfg)  # the descriptor init, the plan and the GEMM
        smem_bytes = None
    else:
        # the descriptor-init kernel and the GEMM
        smem_bytes = km.compile_sm100(cfg, km.WatchSettings(inject=args.inject)).info["smem_bytes"]
    t1 = time.perf_counter()

    new_files = sorted(p for p in dump_dir.glob("*") if p not in before)
    ptx_files = [p for p in new_files if p.suffix == ".ptx"]
    kernels = {}
    for ptx in ptx_files:
        role = ("plan" if "PlanKernel" in ptx.name
                else "init" if "init_descriptors" in ptx.name or "init_on" in ptx.name else "gemm")
        kernels[role] = {"ptx": str(ptx), **scan_ptx(ptx), "ptxas": ptxas_resources(ptx, args.arch)}
    gemm = kernels.get("gemm", {})
    report = {
        "config": args.config,
        "inject": args.inject,
        "config_fields": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        "dsl_version": getattr(cutlass, "__version__", "unknown"),
        "arch": os.environ["CUTE_DSL_ARCH"],
        "compile_s": round(t1 - t0, 3),
        "has_block_scale_mma": gemm.get("block_scale_mma", 0) > 0,
        "ld_local": sum(k.get("ld_local", 0) for k in kernels.values()),
        "st_local": sum(k.get("st_local", 0) for k in kernels.values()),
        "dynamic_smem_bytes": smem_bytes,
        "dynamic_smem_bytes_model": km.sm100_smem_bytes(cfg),
        "tmem_columns_model": km.sm100_tmem_columns(cfg),
        "kernels": kernels,
        "files": [str(p) for p in new_files],
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Compile the sm_100a NVFP4 grouped GEMM (and its descriptor-init kernel) on the CPU and
report what the PTX contains, as one JSON line on stdout.

    CUTE_DSL_ARCH=sm_100a CUTE_DSL_KEEP=ptx,cubin CUTE_DSL_DUMP_DIR=DIR \
        python tools/sm100_compile_check.py --config NAME --out DIR

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


def scan_ptx(ptx: Path) -> dict:
    text = ptx.read_text()
    return {
        "block_scale_mma": len(BLOCK_SCALE_MMA.findall(text)),
        "ld_local": len(re.findall(r"\bld\.local", text)),
        "st_local": len(re.findall(r"\bst\.local", text)),
        "tma_store": len(TMA_STORE.findall(text)),
        "tma_load": len(TMA_LOAD.findall(text)),
        "tcgen05_alloc": len(re.findall(r"tcgen05\.alloc\.", text)),
        "tcgen05_dealloc": len(re.findall(r"tcgen05\.dealloc\.", text)),
        "tensormap_replace": len(re.findall(r"tensormap\.replace", text)),
        "pdl_wait": len(re.findall(r"griddepcontrol\.wait;", text)),
        # global loads, bulk copies or descriptor prefetches before the grid dependency wait:
        # with programmatic dependent launch they could read what the previous kernel writes
        "global_before_pdl_wait": len(re.findall(
            r"\bld\.global|cp\.async\.bulk|prefetch\.tensormap|\bprefetch\.global",
            text.split("griddepcontrol.wait;")[0],
        )) if "griddepcontrol.wait;" in text else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="name in SM100_NAMED_CONFIGS")
    ap.add_argument("--out", required=True, help="dump directory for PTX / cubin")
    ap.add_argument("--arch", default="sm_100a")
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
    compiled = km.compile_sm100(cfg)  # the descriptor-init kernel and the GEMM
    t1 = time.perf_counter()

    new_files = sorted(p for p in dump_dir.glob("*") if p not in before)
    ptx_files = [p for p in new_files if p.suffix == ".ptx"]
    kernels = {}
    for ptx in ptx_files:
        role = "init" if "init_descriptors" in ptx.name else "gemm"
        kernels[role] = {"ptx": str(ptx), **scan_ptx(ptx), "ptxas": ptxas_resources(ptx, args.arch)}
    gemm = kernels.get("gemm", {})
    report = {
        "config": args.config,
        "config_fields": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        "dsl_version": getattr(cutlass, "__version__", "unknown"),
        "arch": os.environ["CUTE_DSL_ARCH"],
        "compile_s": round(t1 - t0, 3),
        "has_block_scale_mma": gemm.get("block_scale_mma", 0) > 0,
        "ld_local": sum(k.get("ld_local", 0) for k in kernels.values()),
        "st_local": sum(k.get("st_local", 0) for k in kernels.values()),
        "dynamic_smem_bytes": compiled.info["smem_bytes"],
        "dynamic_smem_bytes_model": km.sm100_smem_bytes(cfg),
        "tmem_columns_model": km.sm100_tmem_columns(cfg),
        "kernels": kernels,
        "files": [str(p) for p in new_files],
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

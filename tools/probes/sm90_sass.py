"""Compiles one Hopper config for sm_90a on the CPU and summarizes what ptxas made of it:
registers and spills (ptxas -v on the dumped PTX), local-memory instructions in the DSL's
own cubin, and the instruction mix of every loop that issues wgmmas (per iteration): all
its instructions, and those of its fast path (fast_path: without the watchdog's retries,
which a wait runs only when its barrier was not ready).

    python tools/probes/sm90_sass.py                 # the default config
    python tools/probes/sm90_sass.py tile_n=256      # Sm90Config fields as key=value
    python tools/probes/sm90_sass.py --module build/old/submission.py tile_n=256   # another file
    python tools/probes/sm90_sass.py --same-ptx-as build/old/submission.py tile_n=256

--same-ptx-as compiles the config from both files and says whether the kernels' PTX is the
same once the DSL's object names are masked: a kernel that is PTX-identical to a measured
one needs no new measurement.

--same-loops-as is the weaker check for a change outside the main loops (a prologue, an
argument): whether every wgmma loop's SASS is the same instruction for instruction, with
its registers, in the same order, once code addresses are masked. ptxas's schedule of the
same loop has measured 2-3 % apart (docs/performance.md), so a change
whose loops differ needs timing; one whose loops are identical differs only outside them.

Needs ptxas (CUDA toolkit) for the register report and cuobjdump for the SASS; cuobjdump
and the nvdisasm it runs come with `pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`
(the dev extra; found through CUOBJDUMP or that package).
"""

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def find_cuobjdump() -> str | None:
    if os.environ.get("CUOBJDUMP"):
        return os.environ["CUOBJDUMP"]
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia

        for base in nvidia.__path__:
            hits = glob.glob(os.path.join(base, "*", "bin", "cuobjdump"))
            if hits:
                return hits[0]
    except ImportError:
        pass
    return None


def cubin_sass(cuobjdump: str, cubin: str) -> str:
    """cuobjdump -sass of a cubin ('' if it fails). cuobjdump runs nvdisasm from its PATH;
    the pip packages put both in one folder."""
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(cuobjdump), os.environ.get("PATH", "")]))
    return subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, env=env).stdout


def wgmma_loops(sass: str, texts: bool = False):
    """(first, last, instruction counter) of each backward branch's body holding an HGMMA;
    with texts, (first, last, instruction texts with code addresses masked)."""
    ins = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    hgmma = [a for a, t in ins if "HGMMA" in t]
    for addr, text in ins:
        # a loop closes with a predicated backward branch; the unconditional ones jump back
        # from the out-of-line mbarrier retry stubs that ptxas puts after the function
        m = re.search(r"^@!?U?P\d BRA (0x[0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        lo = int(m.group(1), 16)
        if not any(lo <= h <= addr for h in hgmma):
            continue
        if texts:
            yield lo, addr, [re.sub(r"0x[0-9a-f]+", "ADDR", t) for a, t in ins if lo <= a <= addr]
            continue
        ops = collections.Counter()
        for a, t in ins:
            if lo <= a <= addr:
                op = t.split()[1] if t.startswith("@") else t.split()[0]
                ops[op.split(".")[0]] += 1
        yield lo, addr, ops


def fast_path(sass: str, lo: int, hi: int) -> collections.Counter:
    """The instruction mix of loop lo..hi without the code its waits branch over: a wait's
    first mbarrier probe (SYNCS ... TRYWAIT Pn) is followed, later in the loop, by a forward
    @Pn BRA to the end of its retries (watchdog.bounded_mbarrier_wait); the instructions
    between that branch and its target run only when the barrier was not ready. (The DSL's
    own waits branch the other way, @!Pn, to retries ptxas puts after the function.)"""
    body = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and lo <= int(m.group(1), 16) <= hi:
            body.append((int(m.group(1), 16), m.group(2).strip()))
    skipped = []
    for i, (_, text) in enumerate(body):
        probe = re.search(r"TRYWAIT (P\d)", text)
        if not probe:
            continue
        pred = probe.group(1)
        for addr, later in body[i + 1:]:
            branch = re.search(rf"^@{pred} BRA (0x[0-9a-f]+)", later)
            if branch and int(branch.group(1), 16) > addr:
                skipped.append((addr, int(branch.group(1), 16)))
                break
            if re.search(rf"^@!{pred} BRA", later) or (re.search(rf"\b{pred}\b", later) and not later.startswith("@")):
                break  # the DSL's own wait, or the predicate is written again
    ops = collections.Counter()
    for addr, text in body:
        if not any(a < addr < b for a, b in skipped):
            op = text.split()[1] if text.startswith("@") else text.split()[0]
            ops[op.split(".")[0]] += 1
    return ops


def compile_config(module: Path, cfg: str, tmp: str) -> tuple[str, str]:
    """(ptx path, cubin path) of the GEMM kernel of `cfg` compiled from `module` into tmp."""
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx,cubin", CUTE_DSL_DUMP_DIR=tmp)
    code = (f"import sys\nsys.path.insert(0, {str(module.parent)!r})\nimport submission as S\n"
            f"assert S.__file__ == {str(module)!r}, S.__file__\n"
            "import inspect\n"
            # files from before one build served every group count take the count (8)
            "groups = [8] if 'num_groups' in inspect.signature(S.compile_sm90).parameters else []\n"
            # with stages given, the config as written (make_sm90_config picks the stages)
            f"make = S.Sm90Config if {'stages=' in cfg} else S.make_sm90_config\n"
            f"S.compile_sm90(make({cfg}), *groups)\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)
    ptx = [p for p in glob.glob(f"{tmp}/*.ptx") if "__call__" in p][0]
    cubin = [p for p in glob.glob(f"{tmp}/*.cubin") if "__call__" in p][0]
    return ptx, cubin


def masked_ptx(path: str) -> str:
    """The PTX without what differs between identical builds: object addresses in names,
    comments."""
    text = Path(path).read_text()
    return re.sub(r"//.*", "", re.sub(r"object_at_[0-9a-fA-Fx_]+", "OBJ", text))


def same_loops(module: Path, other: Path, cfg: str) -> int:
    """0 when both builds' wgmma loops are the same SASS, instruction for instruction."""
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        print("no cuobjdump: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or set CUOBJDUMP")
        return 2
    loops = []
    for path in (module, other):
        with tempfile.TemporaryDirectory() as tmp:
            sass = cubin_sass(cuobjdump, compile_config(path, cfg, tmp)[1])
        loops.append([body for _, _, body in wgmma_loops(sass, texts=True)])
    mine, theirs = loops
    same = len(mine) == len(theirs) and all(a == b for a, b in zip(mine, theirs))
    # per loop, in address order: a K-loop, then the per-unit loop around it (its tile's
    # prologue and epilogue), phase by phase; "=" marks a loop that is the same SASS
    sizes = " / ".join(f"{len(a)}:{len(b)}{' =' if a == b else ''}" for a, b in zip(mine, theirs))
    print(f"{module} and {other}, config ({cfg}): {len(mine)} and {len(theirs)} wgmma loops "
          f"({sizes} instructions; = same SASS), SASS {'identical' if same else 'DIFFERENT'}")
    return 0 if same else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="tools/probes/sm90_sass.py",
        description="Compiles one Hopper config for sm_90a on the CPU: registers and spills, "
                    "local-memory instructions, and each wgmma loop's instruction mix.",
        epilog="Runs on the CPU (no GPU). Needs ptxas for the register report and cuobjdump "
               "for the SASS (the dev extra installs cuobjdump and nvdisasm).")
    parser.add_argument("fields", nargs="*", metavar="FIELD=VALUE",
                        help="Sm90Config fields, e.g. tile_n=256 (default: the default config)")
    parser.add_argument("--module", type=Path, default=ROOT / "submission.py",
                        help="the submission.py to compile (default: this tree's)")
    parser.add_argument("--same-ptx-as", type=Path, metavar="FILE",
                        help="whether FILE compiles the config to the same PTX, names masked")
    parser.add_argument("--same-loops-as", type=Path, metavar="FILE",
                        help="whether every wgmma loop's SASS is the same as FILE's")
    a = parser.parse_intermixed_args()
    module = a.module.resolve()
    other = a.same_ptx_as.resolve() if a.same_ptx_as else None
    loops_of = a.same_loops_as.resolve() if a.same_loops_as else None
    bad = [f for f in a.fields if "=" not in f]
    if bad:
        parser.error(f"fields are FIELD=VALUE: {' '.join(bad)}")
    kw = dict(item.split("=", 1) for item in a.fields)
    cfg = ", ".join(f"{k}={v}" for k, v in kw.items())
    if loops_of is not None:
        return same_loops(module, loops_of, cfg)
    if other is not None:
        with tempfile.TemporaryDirectory() as t1, tempfile.TemporaryDirectory() as t2:
            same = masked_ptx(compile_config(module, cfg, t1)[0]) == masked_ptx(compile_config(other, cfg, t2)[0])
        print(f"{module} and {other}, config ({cfg}): PTX {'identical' if same else 'DIFFERENT'}")
        return 0 if same else 1
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = compile_config(module, cfg, tmp)
        ptxas = shutil.which("ptxas") or "/usr/local/bin/ptxas"
        if os.path.exists(ptxas):
            out = subprocess.run([ptxas, "-v", "-arch=sm_90a", ptx, "-o", f"{tmp}/k.cubin"],
                                 capture_output=True, text=True).stderr
            for line in out.splitlines():
                if re.search(r"registers|spill|Potential", line):
                    print("ptxas:", line.strip())
        cuobjdump = find_cuobjdump()
        if cuobjdump is None:
            print("no cuobjdump: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or set CUOBJDUMP")
            return 0
        sass = cubin_sass(cuobjdump, cubin)
    local = re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*\b(?:LDL|STL)\b[^;]*);", sass)
    print(f"DSL cubin: {len(local)} local-memory instructions, {sass.count('HGMMA')} HGMMA")
    for addr, text in local:
        print(f"  {int(addr, 16):#x}: {text.strip()}")
    for lo, hi, ops in wgmma_loops(sass):
        top = ", ".join(f"{k} {v}" for k, v in ops.most_common(10))
        fast = sum(fast_path(sass, lo, hi).values())
        print(f"loop {lo:#x}..{hi:#x}: {sum(ops.values())} instructions per iteration, {fast} on its "
              f"fast path ({top})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

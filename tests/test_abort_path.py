"""The abort protocol (docs/design.md section 9) checked on the kernels' PTX, compiled on
the CPU for sm_100a and sm_90a under DSL 4.8.1 and 4.5.2 (NVFP4_DSL452_PYTHON).

Each check walks the PTX path by path (tools/ptx_flow.py): from the give-up of a wait,
with that wait's result 0 and the CTA's abort flag set, what can the thread still do? A
role that gave up issues no new TMA load, MMA, tcgen05 copy, store or arrive; the waits
for work already issued (the drains) are not cut short by the abort flag and stand on
every path to tcgen05.dealloc; in a CTA pair a give-up sets the peer's flag, and every
warp of both CTAs arrives on the pair's exit before either frees TMEM.

The checks are functions of the PTX text, so that they can be run on any build's PTX
(python -c "import tests.test_abort_path as t; ..."); the tests run them on today's.
"""

import functools
import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import ptx_flow  # noqa: E402

from nvfp4_gemm.watchdog import SITE_BY_NAME  # noqa: E402

pytestmark = [pytest.mark.compile, pytest.mark.slow]

SITE = {name: s.id for name, s in SITE_BY_NAME.items()}
TMA_LOAD = r"cp\.async\.bulk\.tensor\.\dd\.(shared::cluster|shared::cta|cta_group::2)|cp\.async\.bulk\.shared"
GLOBAL_STORE = r"\bst\.global|\bst\.relaxed|\bst\.release|(^|\s)red\.|cp\.async\.bulk\.tensor\.\dd\.global\.shared"
REMOTE_ARRIVE = r"mbarrier\.arrive(\.\w+)*\.shared::cluster"
DRAIN_MARK = r"mul\.lo\.u64 lim"  # only a drain's slow path scales its bound (watchdog._slow_path)


def _sites(*names):
    return [SITE[n] for n in names]


# ------------------------------------------------------------------ the checks
def mma_warp_stops(text: str) -> list:
    """After a give-up of the MMA warp: no tcgen05.mma and no tcgen05.cp."""
    return ptx_flow.reached_after(text, _sites("sm100.mma.full", "sm100.mma.acc_empty", "sm100.mma.tail"),
                                  r"tcgen05\.(mma|cp)")


def epilogue_stops(text: str) -> list:
    """After the epilogue's accumulator wait gave up, up to the end of its tile loop (the
    TMEM permit's release in warp 0, the teardown's drain of C's bulk stores in every warp):
    no TMEM load, no store of C, no arrive (the release of the accumulator is one, remote in
    a pair; the teardown's arrives on the pair's exit come after and must)."""
    return ptx_flow.reached_after(text, _sites("sm100.epilogue.acc_full"),
                                  r"tcgen05\.ld|" + GLOBAL_STORE + r"|mbarrier\.arrive",
                                  until=r"tcgen05\.relinquish_alloc_permit|cp\.async\.bulk\.wait_group\.read\s+0;")


def tma_warp_stops(text: str) -> list:
    """After a give-up of the TMA warp (its waits for a stage, and its drain): no TMA load."""
    return ptx_flow.reached_after(text, _sites("sm100.tma.empty", "sm100.tma.tail", "sm100.tma.drain"), TMA_LOAD)


def drains_not_cut_short(text: str, names) -> list:
    """The named drain sites' waits: present, and none reads the abort flag."""
    items, _ = ptx_flow.ptx_cfg(text)
    waits = [w for w in ptx_flow.find_waits(items) if w.site in _sites(*names)]
    found = {w.site for w in waits}
    problems = [f"no wait of {n}" for n in names if SITE[n] not in found]
    return problems + [f"site {w.site}'s wait reads the abort flag" for w in waits if w.reads_abort]


def dealloc_behind(text: str, names) -> list:
    """Paths from the entry to tcgen05.dealloc that pass no wait of each named site."""
    items, _ = ptx_flow.ptx_cfg(text)
    out = []
    for name in names:
        scopes = {w.scope for w in ptx_flow.find_waits(items) if w.site == SITE[name]}
        out += ptx_flow.unavoidable(text, r"tcgen05\.dealloc",
                                    lambda i, code, s=scopes: ptx_flow.scope_of(items[i][1]) in s)
    return out


def drain_after_give_up(text: str, giveups, drain: str) -> list:
    """[] where a give-up of `giveups` is followed by a drain (a wait on the scaled bound)
    on some path; else what is missing. With the drain's own site named too, the drain
    wait found is that one."""
    hits = ptx_flow.reached_after(text, _sites(*giveups), DRAIN_MARK)
    items, _ = ptx_flow.ptx_cfg(text)
    has = any(w.site == SITE[drain] for w in ptx_flow.find_waits(items))
    return [] if hits and has else [f"no drain ({drain}) after a give-up of {giveups}"]


def peer_told(text: str, pair: bool) -> list:
    """Every wait's timeout path stores the CTA pair's other abort flag (st.shared::cluster)
    in a 2-CTA build, and none does in a 1-CTA build; and it claims the record (a CAS on the
    claim word), which no lock guards any more."""
    items, _ = ptx_flow.ptx_cfg(text)
    out = []
    for w in ptx_flow.find_waits(items):
        segment = [ptx_flow.code_of(items[i][1]) for i in range(w.timeout, w.giveup) if not items[i][0]]
        told = any(c.startswith("@e") and "st.volatile.shared::cluster.u32" in c for c in segment)
        if told != pair:
            out.append(f"site {w.site}: the peer's flag {'not ' if pair else ''}set on timeout")
        if not any(c.startswith("atom.global.cas.b32") for c in segment):
            out.append(f"site {w.site}: no claim of the record on timeout")
    if re.search(r"\bWD_LOCK\b", text):
        out.append("the record's writers still take a lock (a second CTA may rewrite it)")
    return out


def pair_exit_on_every_path(text: str) -> list:
    """Paths of lane 0 of a warp of the CTA from the entry to ret with no remote arrive: in
    a CTA pair every warp arrives on the other CTA's exit barrier before it leaves."""
    warps = int(re.search(r"\.reqntid\s+(\d+)", text).group(1)) // 32
    return ptx_flow.unavoidable(text, r"^ret\b", lambda i, code: re.search(REMOTE_ARRIVE, code) is not None,
                                domains=[(ptx_flow.warp_registers(text), range(warps)),
                                         (ptx_flow.lane_registers(text), [0])])


def sm90_stores_nothing_after_give_up(text: str) -> list:
    """After any give-up of the Hopper kernel: no global store (C's TMA or vector stores, a
    partial slot, a split-K flag set or reset)."""
    sites = [s.id for s in SITE_BY_NAME.values() if s.kernel == "sm90"]
    return ptx_flow.reached_after(text, sites, GLOBAL_STORE)


def sm90_producer_stops(text: str) -> list:
    """After a give-up of the Hopper producer (its waits for a stage, and its drain): no
    TMA load or bulk copy."""
    return ptx_flow.reached_after(text, _sites("sm90.producer.empty", "sm90.producer.tail", "sm90.producer.drain"),
                                  TMA_LOAD)


# ------------------------------------------------------------------ the builds
def _dsl_python(dsl: str) -> str:
    if dsl == "dsl481":
        venv = ROOT / ".venv" / "bin" / "python"
        return sys.executable if not venv.exists() else str(venv)
    py = os.environ.get("NVFP4_DSL452_PYTHON", "")
    if not py:
        pytest.skip("NVFP4_DSL452_PYTHON is not set: no nvidia-cutlass-dsl 4.5.2 python to test")
    return py


@functools.cache
def _ptx(dsl: str, kernel: str, config: str, inject: str | None, out: str) -> str:
    """The GEMM's PTX of a watchdog build (sm_100a: a named config; sm_90a: make_sm90_config
    keyword arguments as text), compiled in its own process under the DSL `dsl`."""
    Path(out).mkdir(parents=True, exist_ok=True)
    arch = "sm_100a" if kernel == "sm100" else "sm_90a"
    env = {**os.environ, "CUTE_DSL_ARCH": arch, "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": out}
    if kernel == "sm100":
        cmd = [_dsl_python(dsl), str(ROOT / "tools" / "sm100_compile_check.py"), "--config", config, "--out", out]
        cmd += [] if inject is None else ["--inject", inject]
    else:
        code = ("import submission as S\n"
                f"S.compile_sm90(S.make_sm90_config({config}), S.WatchSettings(inject={inject!r}))\n")
        cmd = [_dsl_python(dsl), "-c", code]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ptx = [p for p in glob.glob(os.path.join(out, "*.ptx")) if "__call__" in p]
    assert len(ptx) == 1, ptx
    return Path(ptx[0]).read_text()


DSLS = ["dsl481", "dsl452"]
PAIR, SINGLE = "swap_2cta_m128n256", "swap_1cta_m128n128"


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    def get(dsl, kernel, config, inject=None):
        out = tmp_path_factory.getbasetemp() / f"abort-{dsl}-{kernel}-{config}-{inject}".replace(" ", "")
        return _ptx(dsl, kernel, config, inject, str(out))
    return get


@pytest.mark.parametrize("dsl", DSLS)
def test_the_mma_warp_issues_no_mma_after_it_gave_up(build, dsl):
    for config in (PAIR, SINGLE):
        assert mma_warp_stops(build(dsl, "sm100", config)) == [], config


@pytest.mark.parametrize("dsl", DSLS)
def test_the_epilogue_reads_stores_and_releases_nothing_after_it_gave_up(build, dsl):
    for config in (PAIR, SINGLE):
        assert epilogue_stops(build(dsl, "sm100", config)) == [], config


@pytest.mark.parametrize("dsl", DSLS)
def test_the_tma_warp_loads_nothing_after_it_gave_up_and_drains_its_loads(build, dsl):
    for config in (PAIR, SINGLE):
        text = build(dsl, "sm100", config)
        assert tma_warp_stops(text) == [], config
        assert drains_not_cut_short(text, ["sm100.tma.drain"]) == [], config
        assert drain_after_give_up(text, ["sm100.tma.empty"], "sm100.tma.drain") == [], config


@pytest.mark.parametrize("dsl", DSLS)
def test_tmem_is_freed_only_behind_the_mma_completion_and_the_pairs_exit(build, dsl):
    """The teardown's waits are drains (the abort flag does not end them) and stand on
    every path to tcgen05.dealloc; also in the build whose second CTA leaves out its
    arrives on the pair's exit (sm100.teardown.peer's fault)."""
    for config, inject in ((PAIR, None), (PAIR, "sm100.teardown.peer"), (SINGLE, None)):
        text = build(dsl, "sm100", config, inject)
        names = ["sm100.teardown.mma_done"] + (["sm100.teardown.peer"] if config == PAIR else [])
        assert drains_not_cut_short(text, names) == [], (config, inject)
        assert dealloc_behind(text, names) == [], (config, inject)


@pytest.mark.parametrize("dsl", DSLS)
def test_a_give_up_tells_the_pairs_other_cta_and_claims_the_record_once(build, dsl):
    assert peer_told(build(dsl, "sm100", PAIR), pair=True) == []
    assert peer_told(build(dsl, "sm100", SINGLE), pair=False) == []
    assert pair_exit_on_every_path(build(dsl, "sm100", PAIR)) == []


@pytest.mark.parametrize("dsl", DSLS)
def test_the_hopper_kernel_stores_nothing_after_a_give_up_and_drains_its_loads(build, dsl):
    """The split-K build at tile_n 256 (FIXUP and PARTIAL pieces, ring staging) and the
    default one: no global store after any give-up (a FIXUP that gave up leaves its flag
    alone), no load after the producer's, and the producer's drain after a give-up."""
    for config in ("tile_n=256, split_k=True", ""):
        text = build(dsl, "sm90", config)
        assert sm90_stores_nothing_after_give_up(text) == [], config
        assert sm90_producer_stops(text) == [], config
        assert drains_not_cut_short(text, ["sm90.producer.drain"]) == [], config
        assert drain_after_give_up(text, ["sm90.producer.empty"], "sm90.producer.drain") == [], config
        assert peer_told(text, pair=False) == [], config

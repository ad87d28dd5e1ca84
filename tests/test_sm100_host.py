"""CPU tests of the sm_100a kernel's host side: legality, config table, can_implement and the
pure host functions (tile counts, stage budget, TMEM columns, compile cache key)."""

import collections
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


sys.path.insert(0, str(ROOT))
from nvfp4_gemm import common, kernel_runner, schedule, sm100  # noqa: E402

BENCH_SHAPES = {
    "bench1": [(m, 4096, 7168, 1) for m in (80, 176, 128, 72, 64, 248, 96, 160)],
    "bench2": [(m, 7168, 2048, 1) for m in (40, 76, 168, 72, 164, 148, 196, 160)],
    "bench3": [(192, 3072, 4096, 1), (320, 3072, 4096, 1)],
    "bench4": [(128, 4096, 1536, 1), (384, 4096, 1536, 1)],
}


@dataclass(frozen=True)
class LegalityCase:
    id: str
    cfg: object
    legal: bool
    reason_part: str = ""


BASE = sm100.make_sm100_config(128, 128, swap_ab=False, cta_group=1)
LEGALITY_CASES = [
    LegalityCase("plain_128x128", BASE, True),
    LegalityCase("swap_2cta_128x256", sm100.make_sm100_config(128, 256, True, 2), True),
    LegalityCase("plain_2cta_256x128", sm100.make_sm100_config(256, 128, False, 2), True),
    LegalityCase("one_acc_stage", replace(BASE, acc_stages=1), False, "acc_stages"),
    LegalityCase("n256_two_acc_stages_tmem", replace(BASE, tile_n=256, ab_stages=3), False, "TMEM"),
    LegalityCase("mma_m_256_needs_2cta", replace(BASE, tile_m=256, ab_stages=3), False, "MMA M"),
    LegalityCase("mma_n_64", replace(BASE, tile_n=64), False, "MMA N"),
    LegalityCase("swap_1cta_tokens_32", sm100.make_sm100_config(32, 128, True, 1), True),
    LegalityCase("tokens_32_2cta", replace(sm100.make_sm100_config(32, 128, True, 1), tile_n=256, cta_group=2),
                 False, "needs swap-AB and one CTA"),
    LegalityCase("n_32_without_swap", replace(BASE, tile_n=32), False, "needs swap-AB and one CTA"),
    LegalityCase("cta_group_4", replace(BASE, cta_group=4), False, "cta_group"),
    LegalityCase("too_many_stages", replace(BASE, ab_stages=12), False, "shared memory"),
    LegalityCase("one_ab_stage", replace(BASE, ab_stages=1), False, "ab_stages"),
]


@pytest.mark.parametrize("case", LEGALITY_CASES, ids=lambda c: c.id)
def test_legality(case):
    ok, reason = sm100.sm100_config_is_legal(case.cfg)
    assert ok == case.legal, reason
    assert case.reason_part in reason


@pytest.mark.parametrize("name", sorted(BENCH_SHAPES))
def test_table_covers_benchmarks_with_legal_configs(name):
    shapes = BENCH_SHAPES[name]
    assert sm100.sm100_problem_signature(shapes) in sm100.SM100_CONFIG_TABLE
    cfg = sm100.choose_sm100_config(shapes)
    assert sm100.sm100_config_is_legal(cfg) == (True, "")
    assert sm100.Sm100BlockScaledGroupedGemm.can_implement(cfg, shapes) == (True, "")


def test_table_configs_are_named_so_the_compile_tests_cover_them():
    named = set(sm100.SM100_NAMED_CONFIGS.values())
    assert set(sm100.SM100_CONFIG_TABLE.values()) <= named


def test_every_named_and_table_config_is_legal():
    for cfg in [*sm100.SM100_CONFIG_TABLE.values(), *sm100.SM100_NAMED_CONFIGS.values()]:
        assert sm100.sm100_config_is_legal(cfg) == (True, ""), cfg


@dataclass(frozen=True)
class ProblemCase:
    id: str
    sizes: list
    ok: bool
    reason_part: str = ""


PROBLEM_CASES = [
    ProblemCase("m1", [(1, 4096, 256, 1)], True),
    ProblemCase("m_not_mult_8", [(37, 256, 512, 1), (129, 128, 256, 1)], True),
    ProblemCase("one_group_min_k", [(128, 128, 256, 1)], True),
    ProblemCase("k_not_mult_256", [(128, 128, 384, 1)], False, "K = 384"),
    ProblemCase("l_2", [(128, 128, 256, 2)], False, "L must be 1"),
    ProblemCase("n_not_mult_8", [(128, 100, 256, 1)], False, "N = 100"),
    ProblemCase("m0", [(0, 128, 256, 1)], False, "empty"),
    ProblemCase("no_groups", [], False, "no groups"),
]


@pytest.mark.parametrize("case", PROBLEM_CASES, ids=lambda c: c.id)
def test_can_implement(case):
    cfg = sm100.choose_sm100_config(case.sizes) if case.sizes else BASE
    ok, reason = sm100.Sm100BlockScaledGroupedGemm.can_implement(cfg, case.sizes)
    assert ok == case.ok, reason
    assert case.reason_part in reason


@pytest.mark.parametrize("m", [(33, 200), (320, 512), (1024, 2048), (512, 1024, 1536, 2048)])
def test_large_weight_sides_take_the_2cta_swap_config_at_any_token_count(m):
    """N >= 1024 and more than 32 tokens somewhere: the benchmark shapes' 2-CTA swap-AB
    config, prefill included (regime_specs.txt's M 512-2048 cases); small N keeps 1-CTA."""
    sizes = [(mm, 4096, 7168, 1) for mm in m]
    assert sm100.choose_sm100_config(sizes) == sm100.SM100_NAMED_CONFIGS["swap_2cta_m128n256"]
    assert sm100.Sm100BlockScaledGroupedGemm.can_implement(sm100.choose_sm100_config(sizes), sizes) == (True, "")
    small_n = [(mm, 512, 7168, 1) for mm in m]
    assert sm100.choose_sm100_config(small_n).cta_group == 1


def test_decode_config_for_groups_of_at_most_32_tokens():
    """1-32 tokens a group: the 32-column token tile (MMA N = 32, one CTA, swap-AB); a
    group of 33 takes a 128- or 256-column tile, and the tiny config refuses it by name
    (its token scales are read from a group's first 128-row atom only)."""
    tiny = sm100.SM100_NAMED_CONFIGS["swap_1cta_m32n128"]
    assert (tiny.mma_m, tiny.mma_n, tiny.cta_group) == (128, 32, 1) and sm100.sm100_is_tiny(tiny)
    decode = [(m, 4096, 7168, 1) for m in (4, 6, 7, 3, 4, 1, 2, 32)]
    assert sm100.choose_sm100_config(decode) == tiny
    assert sm100.Sm100BlockScaledGroupedGemm.can_implement(tiny, decode) == (True, "")
    bigger = decode[:-1] + [(33, 4096, 7168, 1)]
    assert not sm100.sm100_is_tiny(sm100.choose_sm100_config(bigger))
    ok, reason = sm100.Sm100BlockScaledGroupedGemm.can_implement(tiny, bigger)
    assert not ok and reason.startswith("group 7: M = 33 > 32"), reason
    # the scales of a 32-token tile: 128-row atoms in shared memory and TMEM, as at N = 128
    assert sm100.sm100_stage_bytes(tiny) == 128 * 128 + 32 * 128 + 2 * 128 * 16
    assert sm100.sm100_tmem_columns(tiny) == 2 * 32 + 2 * 16


def test_can_implement_rejects_illegal_config():
    ok, reason = sm100.Sm100BlockScaledGroupedGemm.can_implement(
        replace(BASE, acc_stages=1), [(128, 128, 256, 1)]
    )
    assert not ok and "acc_stages" in reason


def test_heuristic_only_returns_legal_configs():
    for sizes in ([(1, 128, 256, 1)], [(4096, 4096, 4096, 1)], [(64, 7168, 2048, 1)] * 3):
        assert sm100.sm100_config_is_legal(sm100.choose_sm100_config(sizes)) == (True, "")


@dataclass(frozen=True)
class TileCase:
    id: str
    cfg: object
    sizes: list
    tiles: list


TILE_CASES = [
    TileCase("plain_partial", BASE, [(1, 128, 256, 1), (129, 384, 256, 1)], [(1, 1), (2, 3)]),
    TileCase(
        "swap_2cta",
        sm100.make_sm100_config(128, 256, True, 2),
        [(80, 4096, 7168, 1), (248, 4096, 7168, 1)],
        [(1, 16), (2, 16)],
    ),
]


@pytest.mark.parametrize("case", TILE_CASES, ids=lambda c: c.id)
def test_tiles_per_group(case):
    assert sm100.sm100_tiles_per_group(case.cfg, case.sizes) == case.tiles
    assert sm100.sm100_num_tiles(case.cfg, case.sizes) == sum(a * b for a, b in case.tiles)


def test_runner_schedule_uses_the_cluster_tile():
    """The shared schedule, cut with the config's tile shape, has one row per cluster tile."""
    cfg = sm100.make_sm100_config(128, 256, True, 2)
    sizes = [(80, 512, 256, 1), (248, 512, 256, 1), (1, 256, 256, 1)]
    rows = schedule.build_tile_schedule(sizes, cfg.tile_m, cfg.tile_n)
    assert len(rows) == len(set(rows)) == sm100.sm100_num_tiles(cfg, sizes)
    assert rows[0][0] == 1 and rows[-1] == (2, 0, 0)  # the 248-row group first, M = 1 last


@pytest.mark.parametrize("seed", range(8))
def test_the_blackwell_order_covers_every_output_element_once_with_columns_together(seed):
    """sm100_tile_order on random group lists, for every named config's tile: each output
    element of every group in exactly one row, each weight column's M tiles adjacent, and
    the runner's schedule (the backend's tile_order) is that order."""
    import random

    rng = random.Random(seed)
    sizes = [(rng.choice([1, 7, 40, 127, 128, 129, 176, 248, 300]), rng.choice([128, 256, 384, 1000]),
              256, 1) for _ in range(rng.choice([1, 2, 3, 8]))]
    for cfg in sm100.SM100_NAMED_CONFIGS.values():
        rows = sm100.sm100_tile_order(sizes, cfg.tile_m, cfg.tile_n)
        covered = collections.Counter()
        for g, tm, tn in rows:
            m, n, _, _ = sizes[g]
            covered.update((g, i, j) for i in range(tm * cfg.tile_m, min(m, (tm + 1) * cfg.tile_m))
                           for j in range(tn * cfg.tile_n, min(n, (tn + 1) * cfg.tile_n)))
        assert set(covered.values()) == {1} and len(covered) == sum(m * n for m, n, _, _ in sizes)
        columns = [(g, tn) for g, _, tn in rows]
        runs = [c for i, c in enumerate(columns) if i == 0 or columns[i - 1] != c]
        assert len(runs) == len(set(columns)), "a weight column's tiles are not adjacent"
        runner = kernel_runner.GroupedGemmRunner(sm100.sm100_backend(), num_sms=148)
        assert runner.host_schedule(tuple(sizes), cfg).tables["schedule"] == rows


def test_grid_is_persistent_and_cluster_aligned():
    cfg2 = sm100.make_sm100_config(128, 256, True, 2)
    assert sm100.sm100_grid_ctas(cfg2, 176, 148) == 148
    assert sm100.sm100_grid_ctas(cfg2, 5, 148) == 10
    assert sm100.sm100_grid_ctas(BASE, 500, 148) == 148
    assert sm100.sm100_grid_ctas(BASE, 3, 148) == 3


def test_grid_follows_the_max_active_clusters_query_asked_once_per_cluster_and_device(monkeypatch):
    """On a device the grid is as many clusters as can be resident at once (the driver's
    occupancy query, stubbed here): fewer than 148 // 2 when GPCs leave SMs unpaired."""
    asked = []

    def query(cluster_size, device_index):
        asked.append((cluster_size, device_index))
        return {1: 148, 2: 70}[cluster_size]

    monkeypatch.setattr(sm100, "query_max_active_clusters", query)
    monkeypatch.setattr(sm100, "_max_active_clusters", {})
    cfg2 = sm100.make_sm100_config(128, 256, True, 2)
    assert sm100.sm100_grid_ctas(cfg2, 176, 148, device_index=0) == 140
    assert sm100.sm100_grid_ctas(cfg2, 5, 148, device_index=0) == 10
    assert sm100.sm100_grid_ctas(sm100.SM100_NAMED_CONFIGS["plain_2cta_m256n128"], 500, 148, device_index=0) == 140
    assert sm100.sm100_grid_ctas(BASE, 500, 148, device_index=0) == 148
    assert sm100.sm100_grid_ctas(cfg2, 500, 148, device_index=1) == 140
    assert asked == [(2, 0), (1, 0), (2, 1)]


def test_a_failed_max_active_clusters_query_keeps_the_sm_count_with_one_warning(monkeypatch):
    def query(cluster_size, device_index):
        raise RuntimeError("no driver")

    monkeypatch.setattr(sm100, "query_max_active_clusters", query)
    monkeypatch.setattr(sm100, "_max_active_clusters", {})
    common._warned.clear()
    cfg2 = sm100.make_sm100_config(128, 256, True, 2)
    with pytest.warns(RuntimeWarning, match="max-active-clusters query failed.*no driver"):
        assert sm100.sm100_grid_ctas(cfg2, 500, 148, device_index=0) == 148
    assert sm100.sm100_grid_ctas(cfg2, 500, 148, device_index=0) == 148  # asked once


def test_stage_bytes_and_budget():
    # 1-CTA 128x128: A 16 KiB + B 16 KiB + SFA 2 KiB + SFB 2 KiB per stage
    assert sm100.sm100_stage_bytes(BASE) == 36864
    assert sm100.sm100_tma_bytes_per_stage(BASE) == 36864
    cfg2 = sm100.make_sm100_config(128, 256, True, 2)
    # per CTA: A 16 KiB + half of B 8 KiB + SFA 2 KiB + whole SFB 2 KiB; barrier counts both
    assert sm100.sm100_stage_bytes(cfg2) == 28672
    assert sm100.sm100_tma_bytes_per_stage(cfg2) == 2 * 28672
    for cfg in (BASE, cfg2):
        stages = sm100.sm100_ab_stages_for_smem(cfg)
        assert cfg.ab_stages == stages
        assert sm100.sm100_smem_bytes(cfg) <= sm100.SM100_SMEM_CAPACITY
        assert sm100.sm100_smem_bytes(replace(cfg, ab_stages=stages + 1)) > sm100.SM100_SMEM_CAPACITY


def test_tmem_columns():
    assert sm100.sm100_tmem_columns(BASE) == 2 * 128 + 16 + 16  # acc x2, SFA, SFB
    assert sm100.sm100_tmem_columns(replace(BASE, tile_n=256)) > sm100.SM100_TMEM_COLUMNS


def test_config_is_hashable_and_named():
    names = {cfg.name for cfg in sm100.SM100_NAMED_CONFIGS.values()}
    assert len(names) == len(sm100.SM100_NAMED_CONFIGS)
    same = replace(BASE)  # another object with BASE's fields
    assert same is not BASE and same == BASE and hash(same) == hash(BASE) and {BASE: 1}[same] == 1
    assert replace(BASE, tile_n=256) not in {BASE: 1}
    # every named config is its own cache key
    assert len({cfg: name for name, cfg in sm100.SM100_NAMED_CONFIGS.items()}) == len(sm100.SM100_NAMED_CONFIGS)


def test_no_device_query_at_import():
    """Importing submission must not touch the GPU: every device query raises here."""
    import subprocess

    code = (
        "import torch\n"
        "def boom(*a, **k): raise RuntimeError('device query at import')\n"
        "for name in ('is_available', 'get_device_capability', 'get_device_properties', 'device_count', 'current_device'):\n"
        "    setattr(torch.cuda, name, boom)\n"
        "import submission\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.compile
def test_compile_cache_key_is_the_config(monkeypatch):
    """The runner compiles once per config (the group count is a launch argument): two
    configs, two entries."""
    calls = []

    class _Storage:
        @staticmethod
        def size_in_bytes():
            return 0

    def fake_compile(fn, *args, **kw):
        calls.append(fn)
        if isinstance(fn, sm100.Sm100BlockScaledGroupedGemm):
            fn.shared_storage = _Storage
        return object()

    monkeypatch.setattr(common.cute, "compile", fake_compile)
    runner = kernel_runner.GroupedGemmRunner(sm100.sm100_backend(), num_sms=148)
    cfg2 = sm100.make_sm100_config(128, 256, True, 2)

    def get(cfg, checked=False):  # what the runner builds for cfg's launches (or self-checked ones)
        return runner.build(cfg, runner.watch_settings(cfg, checked))

    a = get(BASE)
    assert get(replace(BASE)) is a  # an equal config, another object
    b = get(cfg2)
    assert a is not b and len(runner.compiled) == 2
    assert len(calls) == 4  # init + GEMM per entry
    assert get(BASE, checked=True) is not a and len(runner.compiled) == 3  # the watchdog's build


def _blocked_scale_offset(r: int, j: int, rest_k: int) -> int:
    """Byte of scale (row r, scale column j) in the cuBLAS blocked layout (kernel_interface)."""
    return ((r // 128) * rest_k + (j // 4)) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + j % 4


@pytest.mark.compile
@pytest.mark.parametrize("mn,kk", [(1, 256), (200, 512), (384, 1536)], ids=["m1", "m200", "m384"])
def test_tma_scale_layout_matches_the_blocked_layout(mn, kk):
    """The layout the TMA descriptors are built from addresses the same bytes as the
    host's blocked scale layout, for every scale the MMA reads."""
    got = {}

    @common.cute.jit
    def trace():
        layout = common.blockscaled_utils.tile_atom_to_shape_SF((mn, kk, 1), sm100.SM100_SF_VEC_SIZE)
        for r in sorted({0, 1, 31, 32, 127, mn - 1}):
            for kv in sorted({0, 15, 16, 63, 64, kk - 1}):
                got[(r, kv)] = layout((r, kv, 0))

    trace()
    rest_k = -(-kk // 64)
    for (r, kv), off in got.items():
        assert off == _blocked_scale_offset(r, kv // 16, rest_k), (r, kv)


def test_decode_steps_share_a_size_class_and_larger_problems_keep_their_sizes():
    """What the runner's plan and schedule caches rely on (KernelBackend.size_class): a
    problem of at most 32 tokens a group and its class (every M rounded up to 32) get the
    same config, the same can_implement verdict and schedules of the same tiles; anything
    larger, the benchmark shapes among them, is its own class (their schedules' order by
    rows used is what they run with)."""
    import random

    rng = random.Random(7)
    for _ in range(200):
        g, n, k = rng.choice([1, 2, 8, 32, 64]), rng.choice([128, 256, 2048, 4096, 7168]), rng.choice([256, 1024, 7168])
        sizes = tuple((rng.randint(1, sm100.SM100_TINY_MMA_N), n, k, 1) for _ in range(g))
        cls = sm100.sm100_size_class(sizes)
        assert cls == tuple((sm100.SM100_TINY_MMA_N, n, k, 1) for _ in range(g))
        assert sm100.sm100_size_class(cls) == cls
        cfg = sm100.choose_sm100_config(sizes)
        assert sm100.sm100_is_tiny(cfg) and sm100.choose_sm100_config(cls) == cfg
        assert sm100.sm100_can_implement(cfg, cls) == sm100.sm100_can_implement(cfg, sizes)
        tiles = sorted(schedule.build_tile_schedule(sizes, cfg.tile_m, cfg.tile_n))
        assert sorted(schedule.build_tile_schedule(cls, cfg.tile_m, cfg.tile_n)) == tiles
    for shapes in [*BENCH_SHAPES.values(), [(32, 4096, 256, 1), (33, 4096, 256, 1)]]:
        assert sm100.sm100_size_class(shapes) == tuple(map(tuple, shapes))


def test_a_retired_blackwell_config_gives_way_to_the_next_that_takes_the_problem():
    """Retiring configs one by one: the benchmark shape 0 runs the 2-CTA swap config, then
    the 1-CTA swap, the 1-CTA plain and the 2-CTA plain ones, then nothing (the caller's
    torch._scaled_mm); the decode config is never offered to groups of more than 32
    tokens, and a decode step whose tiny config is retired runs the 2-CTA swap one."""
    import warnings

    from nvfp4_gemm.inputs import GroupedProblem

    names = {cfg: name for name, cfg in sm100.SM100_NAMED_CONFIGS.items()}

    def sequence(sizes):
        runner = kernel_runner.GroupedGemmRunner(sm100.sm100_backend(), num_sms=148)
        problem = GroupedProblem(tuple(sizes), None, True, "", "")
        seen = []
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # one per hand-over
                config, reason = runner.plan(problem)
            if config is None:
                return seen, reason
            seen.append(names[config])
            runner.rejected[config] = "failed its self-check (test)"

    seen, reason = sequence(BENCH_SHAPES[sorted(BENCH_SHAPES)[0]])
    assert seen == ["swap_2cta_m128n256", "swap_1cta_m128n128", "plain_1cta_m128n128", "plain_2cta_m256n128"]
    assert "failed its self-check" in reason
    decode = [(m, 4096, 7168, 1) for m in (4, 6, 7, 3, 4, 1, 2, 32)]
    assert sequence(decode)[0][:2] == ["swap_1cta_m32n128", "swap_2cta_m128n256"]


def test_trial_configs_are_named_but_never_chosen_nor_offered():
    """A trial config (SM100_TRIAL_CONFIGS) is compiled and swept, but no call takes it:
    not the table's, not the chooser's on any problem, not an alternative of any config."""
    import random

    trials = {sm100.SM100_NAMED_CONFIGS[name] for name in sm100.SM100_TRIAL_CONFIGS}
    assert trials and not trials & set(sm100.SM100_CONFIG_TABLE.values())
    assert not set(sm100.SM100_TRIAL_CONFIGS) & set(sm100.SM100_ALTERNATIVES)
    for cfg in sm100.SM100_NAMED_CONFIGS.values():
        assert not trials & set(sm100.sm100_alternatives(cfg)), cfg
    rng = random.Random(5)
    problems = list(BENCH_SHAPES.values()) + [
        [(rng.randint(1, 2048), 8 * rng.randint(1, 1024), 256 * rng.randint(1, 28), 1)
         for _ in range(rng.randint(1, 64))]
        for _ in range(300)
    ]
    for sizes in problems:
        assert sm100.choose_sm100_config(sizes) not in trials


@pytest.mark.parametrize("chunks_per_line", [16, 4])
def test_direct_store_chunks_cover_the_epilogue_subtile_once(chunks_per_line):
    """sm100_epi_chunk: the 128 epilogue threads' 4 chunks each cover the 128 x 32 subtile
    (as 8-element chunks along its contiguous mode) exactly once, and each warp's chunks
    of a pass are whole lines (C row segments)."""
    contiguous = 128 if chunks_per_line == 16 else 32
    lines = sm100.SM100_EPI_TILE_ELEMS // contiguous
    passes = sm100.SM100_EPI_TILE_ELEMS // (sm100.SM100_STORE_VECTOR * sm100.SM100_EPI_THREADS)
    seen = collections.Counter()
    for p in range(passes):
        for warp in range(4):
            warp_chunks = [sm100.sm100_epi_chunk(32 * warp + lane, p, chunks_per_line) for lane in range(32)]
            by_line = collections.Counter(line for _, line in warp_chunks)
            assert all(n == chunks_per_line for n in by_line.values()), by_line
            seen.update(warp_chunks)
    assert set(seen.values()) == {1}
    assert set(seen) == {(c, line) for c in range(chunks_per_line) for line in range(lines)}


@pytest.mark.parametrize("bits,base,shift", [(3, 4, 3), (2, 4, 3), (1, 4, 3)])
def test_swizzle_offset_is_cutes_swizzle_and_keeps_16_byte_chunks_whole(bits, base, shift):
    """swizzle_offset against CuTe's definition (Swizzle<B, M, S>: yyy_msk = ((1 << B) - 1)
    << (M + S); x ^ ((x & yyy_msk) >> S)), a bijection on each 1024-byte block that moves
    16-byte chunks whole (base 4): a chunk's 16 bytes stay contiguous."""
    yyy = ((1 << bits) - 1) << (base + shift)
    block = 1 << (base + shift + bits)
    images = [sm100.swizzle_offset(x, bits, base, shift) for x in range(block)]
    assert images == [x ^ ((x & yyy) >> shift) for x in range(block)]
    assert sorted(images) == list(range(block))
    for x in range(0, block, 16):
        assert images[x:x + 16] == list(range(images[x], images[x] + 16))

"""custom_kernel on a real GPU against the exact reference (skips without CUDA).

On sm_90 / sm_100 every call must run the kernel: conftest's guard fails a test on any
fallback warning, each call is asserted to issue exactly one kernel launch, and a GPU of
those architectures that takes another path fails (conftest.required_path). On other GPUs
the same calls check the torch path.
"""

import dataclasses
import gc
import random
import warnings

import pytest
import torch
from cases import Case, sm90_made_fields, task_cases
from conftest import kernel_launches, required_path, requires_cuda, requires_sm100

import reference
import submission
from utils import verbose_allclose

pytestmark = [pytest.mark.gpu, requires_cuda]


def _clone(data):
    return ([tuple(t.clone() for t in g) for g in data[0]], data[1], [tuple(t.clone() for t in g) for g in data[2]], list(data[3]))


def _launching(call, launches: int = 1):
    """call()'s result, asserting that it issued `launches` kernel launches where this GPU
    has a kernel (required_path), none elsewhere."""
    expected = launches if required_path() is not None else 0
    before = kernel_launches()
    out = call()
    got = kernel_launches() - before
    assert got == expected, f"{got} kernel launches where {expected} were expected (path {required_path()})"
    return out


def _check(case_args):
    data = reference.generate_input(**case_args)
    expected = reference.ref_kernel(_clone(data))
    out = _launching(lambda: submission.custom_kernel(data))
    torch.cuda.synchronize()
    for g, (o, e) in enumerate(zip(out, expected)):
        assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"group {g}"
    return data, out


@pytest.mark.parametrize("case", task_cases("tests"), ids=lambda c: c.id)
def test_task_tests(case):
    _check(case.args())


@pytest.mark.parametrize("case", task_cases("tests"), ids=lambda c: c.id)
def test_hopper_kernel_is_bit_identical_to_the_reference_on_the_task_tests(case, kernel_path):
    """What docs/verification.md states of the Hopper kernel on task.yml's tests: its C equals
    the reference's bit for bit, not only within the tolerance."""
    if kernel_path != "sm90":
        pytest.skip(f"the claim is the Hopper kernel's; this GPU runs the {kernel_path} kernel")
    data, out = _check(case.args())
    expected = reference.ref_kernel(_clone(data))
    for g, (o, e) in enumerate(zip(out, expected)):
        assert torch.equal(o.view(torch.int16), e.view(torch.int16)), f"group {g}"


@pytest.mark.parametrize("case", task_cases("benchmarks"), ids=lambda c: c.id)
def test_benchmark_shapes_15_seeds(case):
    for i in range(15):
        _check({**case.args(), "seed": case.seed + 42 * (i + 1)})


EDGE = [
    Case("m1", (1,), (4096,), (7168,)),
    Case("m7", (7,), (7168,), (2048,)),
    Case("m129", (129,), (3072,), (4096,)),
    Case("m1000", (1000,), (1536,), (1536,)),
    Case("n128_k256", (64,), (128,), (256,)),
    Case("n7168_k7168", (40,), (7168,), (7168,)),
    Case("g1", (256,), (512,), (512,)),
    # the TMA-store epilogue clips a partial weight tile (N = 200); N = 100 has no 16-byte
    # C pitch, so that group takes the element-store path in the same launch
    Case("n_partial_and_unaligned", (72, 130, 40), (200, 100, 136), (256, 512, 256)),
    Case("g16_mixed", tuple(random.Random(0).choice([1, 7, 40, 129, 384]) for _ in range(16)), (256,) * 8 + (640,) * 8, (256,) * 8 + (768,) * 8),
]


@pytest.mark.parametrize("case", EDGE, ids=lambda c: c.id)
def test_edge_shapes(case):
    _check(case.args())


def test_new_pointers_do_not_wait_for_queued_work():
    """A call with new tensors (known sizes) builds its pointer table and descriptors without
    synchronizing: queued behind a long sleep kernel, it must return while the sleep still
    runs. (A pageable host-to-device copy would wait for the sleep.)"""
    data = reference.generate_input(m=(96, 200), n=(256, 384), k=(512, 256), g=2, seed=41)
    submission.custom_kernel(data)  # compiles and plans these sizes
    fresh = _clone(data)
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time
    out = _launching(lambda: submission.custom_kernel(fresh))
    done = torch.cuda.Event()
    done.record()  # behind the sleep and the call's kernels on the default queue
    still_running = not done.query()
    torch.cuda.synchronize()
    assert still_running, "custom_kernel waited for work queued before it"
    expected = reference.ref_kernel(_clone(data))
    assert all(verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [] for o, e in zip(out, expected))


def test_output_not_16_byte_aligned():
    """c views at a 2-byte offset: no TMA store can address them, the element stores do."""
    data = reference.generate_input(m=(96, 64), n=(256, 128), k=(512, 256), g=2, seed=9)
    abc = []
    for a, b, c in data[0]:
        flat = torch.zeros(c.numel() + 1, dtype=c.dtype, device=c.device)
        abc.append((a, b, flat[1:].view(c.shape)))
    data = (abc, data[1], data[2], data[3])
    assert all(c.data_ptr() % 16 for _, _, c in abc)
    expected = reference.ref_kernel(_clone(data))
    out = _launching(lambda: submission.custom_kernel(data))
    torch.cuda.synchronize()
    for g, (o, e) in enumerate(zip(out, expected)):
        assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"group {g}"


def _run_small_grid(num_sms, backend, **config_changes):
    """Four groups on a tiny persistent grid, checked against the reference."""
    data = reference.generate_input(m=(40, 200, 129, 64), n=(512, 256, 384, 256), k=(512, 256, 768, 256), g=4, seed=5)
    expected = reference.ref_kernel(_clone(data))
    problem = submission.validate_inputs(data)
    runner = submission.GroupedGemmRunner(backend, num_sms=num_sms)
    config, reason = runner.plan(problem)
    assert config is not None, reason
    config = dataclasses.replace(config, **config_changes)
    assert not config_changes or submission.sm90_config_is_legal(config)
    out = runner.run(data, problem, config)
    assert runner.launches == 1 and not runner.rejected
    torch.cuda.synchronize()
    for g, (o, e) in enumerate(zip(out, expected)):
        assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"group {g}"


@pytest.mark.parametrize("num_sms", [1, 3])
def test_many_tiles_per_cta_both_phases(num_sms, kernel_path):
    """A tiny persistent grid: every CTA walks many tiles of every schedule phase (full
    tiles, then the narrow widths' tiles), so pipeline state must carry across tiles and
    phases. A kernel that loses it hangs or is wrong here, not on small task shapes."""
    _run_small_grid(num_sms, submission._BACKENDS[kernel_path]())


@pytest.mark.parametrize("num_sms", [1, 3])
def test_every_tile_width(num_sms, kernel_path):
    """Hopper at every tile_n (128: one m64 wgmma block per consumer warpgroup; 192: three WGs of one; 256: two of two),
    on a tiny grid so that every CTA walks many tiles of both phases."""
    if kernel_path != "sm90":
        pytest.skip(f"Hopper-only config; this GPU runs the {kernel_path} kernel")
    for tile_n in submission.SM90_TILE_NS:
        _run_small_grid(num_sms, submission.sm90_backend(), **sm90_made_fields(submission, tile_n))


@pytest.mark.parametrize("num_sms", [3, 7, 132])
def test_k_range_every_tile_width(num_sms, kernel_path):
    """Hopper with split-K pieces (k_range_units) at every tile_n: on 3 and 7 CTAs most
    CTAs hold a PARTIAL and a FIXUP of different tiles, on 132 most tiles are split."""
    if kernel_path != "sm90":
        pytest.skip(f"Hopper-only config; this GPU runs the {kernel_path} kernel")
    for tile_n in submission.SM90_TILE_NS:
        _run_small_grid(num_sms, submission.sm90_backend(), **sm90_made_fields(submission, tile_n, split_k=True))


@pytest.mark.parametrize(
    "tile_n, narrow, split_k",
    [(128, (96, 64), False), (256, (96, 64), True), (128, (96, 32), True), (256, (64, 32), False),
     (192, (96, 64), True), (192, (64,), False)],
)
@pytest.mark.parametrize("num_sms", [3, 132])
def test_token_width_phases(num_sms, tile_n, narrow, split_k, kernel_path):
    """Hopper with three token-width phases (split_tiles_by_width): groups whose last M
    tiles use 1 to 128 rows land in every phase, each multiplied at its own wgmma N with
    its own decode split; on 3 CTAs every CTA walks all three phases, whole or split."""
    if kernel_path != "sm90":
        pytest.skip(f"Hopper-only config; this GPU runs the {kernel_path} kernel")
    m = (30, 72, 96, 200, 129, 250, 64, 33)
    data = reference.generate_input(m=m, n=(512, 256, 384, 256, 512, 256, 128, 384),
                                    k=(512, 256, 768, 256, 512, 768, 256, 512), g=len(m), seed=17)
    expected = reference.ref_kernel(_clone(data))
    problem = submission.validate_inputs(data)
    runner = submission.GroupedGemmRunner(submission.sm90_backend(), num_sms=num_sms)
    config = submission.make_sm90_config(tile_n, narrow=narrow, split_k=split_k)
    sizes = [(mm, n, k, 1) for mm, n, k in zip(m, (512, 256, 384, 256, 512, 256, 128, 384),
                                                (512, 256, 768, 256, 512, 768, 256, 512))]
    _, counts = submission.split_tiles_by_width(
        submission.build_tile_schedule(sizes, 128, tile_n), sizes, config.widths)
    assert all(counts), counts  # every phase has tiles
    out = runner.run(data, problem, config)
    assert runner.launches == 1 and not runner.rejected
    torch.cuda.synchronize()
    for g, (o, e) in enumerate(zip(out, expected)):
        assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"group {g} (M = {m[g]})"


def test_one_build_serves_every_group_count(kernel_path):
    """The group count is a launch argument, not compiled in: one runner and one config
    over problems of 1, 5, 16 and 2 groups (the descriptor-init grid and the GEMM's schedule
    prefetch follow it at run time), each correct, on one compiled build of the config
    besides the watchdog's build that its first launch runs."""
    backend = submission._BACKENDS[kernel_path]()
    runner = submission.GroupedGemmRunner(backend, num_sms=torch.cuda.get_device_properties(0).multi_processor_count,
                                          device_index=torch.cuda.current_device())
    config = None
    rng = random.Random(5)
    for g in (1, 5, 16, 2):
        m = [rng.choice((1, 40, 128, 200)) for _ in range(g)]
        n = [rng.choice((128, 256, 384)) for _ in range(g)]
        k = [rng.choice((256, 512)) for _ in range(g)]
        data = reference.generate_input(m=m, n=n, k=k, g=g, seed=60 + g)
        expected = reference.ref_kernel(_clone(data))
        problem = submission.validate_inputs(data)
        if config is None:
            config, reason = runner.plan(problem)
            assert config is not None, reason
        ok, reason = backend.can_implement(config, [s for s in problem.sizes if s[0] and s[1]])
        assert ok, reason
        out = runner.run(data, problem, config)
        torch.cuda.synchronize()
        for i, (o, e) in enumerate(zip(out, expected)):
            assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"G = {g}, group {i}"
    assert runner.guarded == {config} and runner.launches == 4 and not runner.rejected
    assert len(runner.compiled) == 2 and {key[0] for key in runner.compiled._data} == {config}


def test_k_range_benchmark_shape_resets_its_flags(kernel_path):
    """Shape 2 of task.yml split by K-range at both tile widths: correct, bitwise the same
    on a replay, and every arrival flag back at zero after each call (the FIXUPs reset
    them; a flag left set would let the next call read a stale partial)."""
    if kernel_path != "sm90":
        pytest.skip(f"Hopper-only config; this GPU runs the {kernel_path} kernel")
    data = reference.generate_input(m=(192, 320), n=(3072, 3072), k=(4096, 4096), g=2, seed=11)
    expected = reference.ref_kernel(_clone(data))
    problem = submission.validate_inputs(data)
    for tile_n in submission.SM90_TILE_NS:
        runner = submission.GroupedGemmRunner(submission.sm90_backend(), num_sms=132)
        config = submission.make_sm90_config(tile_n, split_k=True)
        first = [o.clone() for o in runner.run(data, problem, config)]
        table = next(iter(runner.pointers._data.values()))
        assert table.scratch is not None and table.scratch.flags.numel() > 0
        for _ in range(3):
            again = runner.run(data, problem, config)
            torch.cuda.synchronize()
            assert int(table.scratch.flags.abs().sum()) == 0, f"tile_n {tile_n}: flags left set"
            assert all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(first, again))
        assert runner.launches == 4 and not runner.rejected
        for g, (o, e) in enumerate(zip(first, expected)):
            assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"tile_n {tile_n}, group {g}"


def test_later_launches_take_the_executors_entry_point(kernel_path):
    """bind_launch's first launch goes through the DSL's own run_compiled_program; later ones
    call the DSL executor's C entry point with arguments packed once (direct_launcher). Under
    the DSL installed here later launches must take that direct path (not silently the
    DSL's slower one), and compute bit for bit what the first launch computed. (Without
    the watchdog: a config's first launch would otherwise run its guarded build.)"""
    import cutlass

    data = reference.generate_input(m=(96, 200), n=(256, 384), k=(512, 256), g=2, seed=71)
    expected = reference.ref_kernel(_clone(data))
    problem = submission.validate_inputs(data)
    runner = submission.GroupedGemmRunner(submission._BACKENDS[kernel_path](),
                                          torch.cuda.get_device_properties(0).multi_processor_count,
                                          self_check=False, device_index=torch.cuda.current_device(),
                                          watchdog_ms=0)
    config, reason = runner.plan(problem)
    assert config is not None, reason
    first = [c.clone() for c in runner.run(data, problem, config)]  # the DSL's launch path
    table = next(iter(runner.pointers._data.values()))
    how = table.launch.how()
    assert how == "direct", f"nvidia-cutlass-dsl {cutlass.__version__}: later launches take the {how} path"
    for _, _, c in data[0]:
        c.fill_(float("nan"))
    again = runner.run(data, problem, config)  # the direct path
    torch.cuda.synchronize()
    assert runner.launches == 2 and table.launch.how() == "direct"
    for g, (x, y, e) in enumerate(zip(first, again, expected)):
        assert torch.equal(x.view(torch.int16), y.view(torch.int16)), f"group {g}"
        assert verbose_allclose(y, e, rtol=1e-3, atol=1e-3) == [], f"group {g}"


def test_new_pointer_tables_launch_without_the_dsls_packing(kernel_path, monkeypatch):
    """The ranked mode's first round: new pointers, same sizes. The first table's launches
    (descriptor init and GEMM) go through the DSL and teach the runner each function's
    packing (binding.bind_launch); a later table's pack their arguments themselves, none
    through the DSL's generate_execution_args, and compute what the reference does.
    (Without the watchdog, whose guarded first launch is a build of its own.)"""
    from cutlass.base_dsl import jit_executor

    packings = []
    dsl_packing = jit_executor.JitCompiledFunction.generate_execution_args

    def counted(self, *args, **kwargs):
        packings.append(getattr(self, "__name__", "?"))
        return dsl_packing(self, *args, **kwargs)

    monkeypatch.setattr(jit_executor.JitCompiledFunction, "generate_execution_args", counted)
    runner = submission.GroupedGemmRunner(submission._BACKENDS[kernel_path](),
                                          torch.cuda.get_device_properties(0).multi_processor_count,
                                          self_check=False, device_index=torch.cuda.current_device(),
                                          watchdog_ms=0)
    for seed in (72, 73, 74):
        data = reference.generate_input(m=(96, 200), n=(256, 384), k=(512, 256), g=2, seed=seed)
        expected = reference.ref_kernel(_clone(data))
        problem = submission.validate_inputs(data)
        config, reason = runner.plan(problem)
        assert config is not None, reason
        out = runner.run(data, problem, config)
        torch.cuda.synchronize()
        for g, (o, e) in enumerate(zip(out, expected)):
            assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"seed {seed}, group {g}"
        if seed == 72:
            first_table = list(packings)
            assert len(first_table) >= 2, packings  # the init and the GEMM, through the DSL once each
    assert packings == first_table, f"later tables went through the DSL's packing: {packings[len(first_table):]}"
    assert len(runner.pointers) == 3 and runner.launches == 3


@pytest.mark.parametrize("split_k", [False, True], ids=["chosen", "split_k"])
def test_the_first_timed_round_takes_over_the_correctness_pass_tables(kernel_path, split_k):
    """A shape as the leaderboard runs it (tests/test_runner.py has the same on the CPU):
    a correctness pass on a clone of each of 15 inputs, keeping the outputs and freeing
    the rest after each call, then a timed round on the inputs (new pointers, same sizes).
    The queue is kept busy, so that each taken-over table's rows are uploaded and its
    descriptors re-initialized while the GEMM that read the old ones is still queued: the
    round makes no table, every product matches the reference, and with split-K every
    arrival flag is back at zero."""
    if split_k and kernel_path != "sm90":
        pytest.skip(f"Hopper-only config; this GPU runs the {kernel_path} kernel")
    runner = submission.GroupedGemmRunner(submission._BACKENDS[kernel_path](),
                                          torch.cuda.get_device_properties(0).multi_processor_count,
                                          self_check=False, device_index=torch.cuda.current_device())
    count = submission.TABLES_BEFORE_REUSE
    if split_k:
        sizes = dict(m=(192, 320), n=(3072, 3072), k=(4096, 4096), g=2)
    else:
        sizes = dict(m=(96, 200), n=(256, 384), k=(512, 256), g=2)
    inputs = [reference.generate_input(**sizes, seed=120 + i) for i in range(count)]
    expected = [reference.ref_kernel(_clone(d)) for d in inputs]

    def call(data):
        problem = submission.validate_inputs(data)
        config = submission.make_sm90_config(256, split_k=True) if split_k else runner.plan(problem)[0]
        assert config is not None
        return runner.run(data, problem, config)

    kept = []
    torch.cuda._sleep(20_000_000)
    for data in inputs:
        clone = _clone(data)
        kept.append(call(clone))
        del clone
    torch.cuda.synchronize()
    tables = list(runner.pointers._data.values())
    assert len(tables) == count and all(t.live == 0 for t in tables)
    for i, (out, exp) in enumerate(zip(kept, expected)):
        for g, (o, e) in enumerate(zip(out, exp)):
            assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"pass, input {i}, group {g}"
    del kept
    for data in inputs:
        for abc in data[0]:
            abc[2].zero_()
    torch.cuda._sleep(20_000_000)
    outs = [call(data) for data in inputs]
    torch.cuda.synchronize()
    assert {id(t) for t in runner.pointers._data.values()} == {id(t) for t in tables}
    assert all(t.live == 1 for t in tables) and runner.launches == 2 * count and not runner.rejected
    for i, (out, exp) in enumerate(zip(outs, expected)):
        for g, (o, e) in enumerate(zip(out, exp)):
            assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"round, input {i}, group {g}"
    if split_k:
        assert all(int(t.scratch.flags.abs().sum()) == 0 for t in tables), "flags left set"


def test_a_small_table_upload_reads_the_host_buffer_at_the_call():
    """to_device_async copies a small table from pageable memory without waiting for the
    queue: the driver stages the bytes at the call, so the host buffer may change (or be
    freed) at once, while the queue is still busy."""
    values = list(range(-(10**12), -(10**12) + 48))
    for _ in range(5):
        torch.cuda._sleep(50_000_000)  # the queue is busy for tens of milliseconds
        host = torch.tensor(values, dtype=torch.int64)
        device = submission.to_device_async(host, torch.device("cuda"))
        host.fill_(-1)
        torch.cuda.synchronize()
        assert device.tolist() == values


def test_bitwise_deterministic():
    """Six calls on the same inputs give the same bits (poisoned between calls, so a call
    that computed nothing would not), and match the reference."""
    data = reference.generate_input(m=(80, 176), n=(4096, 4096), k=(7168, 7168), g=2, seed=3)
    expected = reference.ref_kernel(_clone(data))
    first = [c.clone() for c in _launching(lambda: submission.custom_kernel(data))]
    assert all(verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [] for o, e in zip(first, expected))
    for _ in range(5):
        for _, _, c in data[0]:
            c.fill_(float("nan"))
        again = _launching(lambda: submission.custom_kernel(data))
        assert all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(first, again))


def test_new_values_in_same_tensors():
    data = reference.generate_input(m=(96, 200), n=(256, 384), k=(512, 256), g=2, seed=21)
    submission.custom_kernel(data)
    other = reference.generate_input(m=(96, 200), n=(256, 384), k=(512, 256), g=2, seed=22)
    for part in (0, 1, 2):
        for g in range(2):
            for t, u in zip(data[part][g], other[part][g]):
                t.copy_(u)
    out = _launching(lambda: submission.custom_kernel(data))
    expected = reference.ref_kernel(_clone(data))
    assert all(verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [] for o, e in zip(out, expected))


def test_reallocated_addresses_other_shapes():
    """Inputs freed, then new inputs of other shapes at the addresses the caching allocator
    hands back: no cached table of the old shapes may serve them (each is checked against
    the reference), and the test asserts that addresses were in fact reused."""
    first = reference.generate_input(m=(128,), n=(256,), k=(512,), g=1, seed=31)
    _launching(lambda data=first: submission.custom_kernel(data))
    torch.cuda.synchronize()
    freed = {t.data_ptr() for g in (*first[0], *first[2]) for t in g}
    del first
    gc.collect()
    reused = set()
    for m, n, k in [(64, 256, 512), (200, 128, 256), (128, 512, 256)]:
        data, out = _check({"m": (m,), "n": (n,), "k": (k,), "g": 1, "seed": m + n})
        reused |= freed & {t.data_ptr() for g in (*data[0], *data[2]) for t in g}
        del data, out
        gc.collect()
    assert reused, "the allocator reused none of the freed addresses: the case tested nothing"


DECODE_CASES = [
    {"m": (4, 6, 7, 3, 4, 1, 2, 3), "n": (4096,) * 8, "k": (7168,) * 8, "g": 8, "seed": 2026},
    {"m": (4, 32, 1, 17, 9, 25, 2, 30), "n": (7168,) * 8, "k": (2048,) * 8, "g": 8, "seed": 7},
]


@pytest.mark.parametrize("args", DECODE_CASES, ids=["g8-tokens1-8", "g8-tokens1-32"])
def test_decode_regime(args):
    """Groups of 1-32 tokens that the choosers give the decode configs (Hopper: 32-token
    tiles with a width-16 phase; Blackwell: MMA N = 32), checked against the reference.
    (Where the tiles are far fewer than the SMs, Hopper's model prefers 128-token tiles
    split along K: a mix of K and N among 1-32 token groups goes there.)"""
    sizes = [(m, n, k, 1) for m, n, k in zip(args["m"], args["n"], args["k"])]
    if required_path() == "sm90":
        assert submission.choose_sm90_config(sizes, 132).tile_m == 32
    elif required_path() == "sm100":
        assert submission.sm100_is_tiny(submission.choose_sm100_config(sizes))
    _check(args)


@requires_sm100
def test_reference_agrees_with_cublas_fp4():
    data = reference.generate_input(m=(96, 128), n=(128, 256), k=(256, 512), g=2, seed=1111)
    ours = reference.ref_kernel(_clone(data))
    cublas = reference.scaled_mm_reference(data)
    assert all(verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [] for o, e in zip(ours, cublas))


def test_self_check_passes_on_the_real_kernel(kernel_path):
    """The self-check on this GPU's kernel (forced on): the task's test shapes pass it, so
    it never retires a correct config (on a B200 it is on by default)."""
    runner = submission.GroupedGemmRunner(submission._BACKENDS[kernel_path](),
                                          torch.cuda.get_device_properties(0).multi_processor_count,
                                          self_check=True)
    for case in task_cases("tests"):
        data = reference.generate_input(**case.args())
        expected = reference.ref_kernel(_clone(data))
        problem = submission.validate_inputs(data)
        config, reason = runner.plan(problem)
        assert config is not None, reason
        out = runner.run(data, problem, config)
        for g, (o, e) in enumerate(zip(out, expected)):
            assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"{case.id} group {g}"
    assert not runner.rejected, runner.rejected
    assert len(runner.checked) == len(task_cases("tests")) == runner.launches


@pytest.mark.fallback_expected
def test_unaligned_weights_fall_back_without_a_fault():
    """b at a 4-byte offset: no TMA load can address it, so the call takes the fallback
    (one warning naming the group) instead of faulting in the kernel."""
    data = reference.generate_input(m=(96, 64), n=(256, 128), k=(512, 256), g=2, seed=10)
    a, b, c = data[0][1]
    flat = torch.zeros(b.numel() + 16, dtype=torch.uint8, device=b.device)
    moved = flat[4:4 + b.numel()].view(b.dtype).view(b.shape)
    moved.view(torch.uint8).copy_(b.view(torch.uint8))
    data[0][1] = (a, moved, c)
    expected = reference.ref_kernel(_clone(data))
    submission._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _launching(lambda: submission.custom_kernel(data), launches=0)
    torch.cuda.synchronize()
    if required_path() is not None:
        assert any("group 1: b starts at 4 bytes" in str(w.message) for w in caught), [str(w.message) for w in caught]
    for g, (o, e) in enumerate(zip(out, expected)):
        assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"group {g}"


@pytest.mark.parametrize("num_sms", [7, 11, 132])
def test_balanced_units_every_phase_on_tiny_grids(num_sms, monkeypatch, kernel_path):
    """balanced_units forced at both tile widths on grids where it splits (long K = 2048
    tiles against short ones): takers holding several PARTIALs before whole tiles, givers
    ending phases with a FIXUP. The chooser uses it only for one wave at tile_n 128."""
    if kernel_path != "sm90":
        pytest.skip(f"Hopper-only schedule; this GPU runs the {kernel_path} kernel")

    def balanced(sizes, cfg, grid):
        rows = submission.build_tile_schedule(sizes, cfg.tile_m, cfg.tile_n)
        rows, phase_sizes = submission.split_tiles_by_width(rows, sizes, cfg.widths)
        kt_us = [submission.SM90_BALANCE_KTILE_US[w] for w in cfg.widths]
        return submission.balanced_units(rows, phase_sizes, [k // 128 for _, _, k, _ in sizes], grid, kt_us, 1.0, 0.8)

    monkeypatch.setattr(submission, "sm90_work_schedule", balanced)
    m, n, k = (128, 64, 200, 40), (512, 512, 256, 384), (2048, 256, 1024, 256)
    data = reference.generate_input(m=m, n=n, k=k, g=len(m), seed=5)
    expected = reference.ref_kernel(_clone(data))
    problem = submission.validate_inputs(data)
    splits = 0
    for tile_n in (128, 256):
        cfg = submission.make_sm90_config(tile_n, split_k=True)
        splits += balanced([(a, b, c, 1) for a, b, c in zip(m, n, k)], cfg, num_sms).num_slots
        runner = submission.GroupedGemmRunner(submission.sm90_backend(), num_sms=num_sms)
        out = runner.run(data, problem, cfg)
        assert runner.launches == 1 and not runner.rejected
        torch.cuda.synchronize()
        for g, (o, e) in enumerate(zip(out, expected)):
            assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"tile_n {tile_n} group {g}"
    assert splits > 0


@pytest.mark.parametrize("case", task_cases("tests") + [
    Case("bench3", (128, 384), (4096, 4096), (1536, 1536)),
    Case("m1_k7168", (1, 7), (128, 7168), (7168, 256)),
], ids=lambda c: c.id)
def test_fp16_fallback_on_the_gpu(case):
    """The fallback of CUDA devices without one of our kernels, run here on this GPU: fp16
    operands, cuBLAS with fp32 sums, within the tolerance of the fp32 reference."""
    data = reference.generate_input(**case.args())
    expected = reference.ref_kernel(_clone(data))
    out = submission.run_torch_fp16(data, submission.validate_inputs(data))
    torch.cuda.synchronize()
    for g, (o, e) in enumerate(zip(out, expected)):
        assert verbose_allclose(o, e, rtol=1e-3, atol=1e-3) == [], f"group {g}"


@pytest.mark.parametrize("case", [
    Case("bench1", (40, 76, 168, 72, 164, 148, 196, 160), (7168,) * 8, (2048,) * 8),
    Case("m1_k7168", (1, 7), (128, 7168), (7168, 256)),
    Case("edges", (129, 1000, 3), (384, 128, 256), (768, 256, 4096)),
], ids=lambda c: c.id)
def test_fp4_decoder_gives_the_torch_decodes_bits(case, monkeypatch):
    """The fp16 fallback's decode kernel (Fp4RowDecoder) against the torch decode: the same
    fp16 operands bit for bit (a NaN scale's block NaN in both), so the same C; in two
    batches as well as one."""
    device = torch.device("cuda")
    assert submission.fp4_decoder(device) is not None, "the decode kernel did not compile here"
    data = reference.generate_input(**case.args())
    nan = torch.tensor([float("nan")], device=device).to(torch.float8_e4m3fn)
    data[2][0][1][3, 0, 0, 1, 0, 0] = nan[0]  # group 0's b, row 3, K 16..31
    problem = submission.validate_inputs(data)
    groups = list(range(len(problem.sizes)))
    jobs, decoded = submission.decode_jobs(data, problem, groups)
    submission.launch_decoder(submission.fp4_decoder(device), jobs, device)
    for g in groups:
        k = problem.sizes[g][2]
        for side in (0, 1):
            got = decoded[g][side]
            want = submission._dequantize_rows_f16(data[0][g][side][:, :, 0], data[2][g][side], k)
            assert torch.equal(torch.isnan(got), torch.isnan(want)), (g, side)
            assert torch.equal(got.nan_to_num().view(torch.int16), want.nan_to_num().view(torch.int16)), (g, side)
    assert torch.isnan(decoded[0][1][3, 16:32]).all()
    by_torch = [c.clone() for c in submission.run_torch_fp16(_clone(data), problem, decode_kernel=False)]
    for limit in (submission.DECODE_BATCH_BYTES, 1):  # one launch; one group per launch
        monkeypatch.setattr(submission, "DECODE_BATCH_BYTES", limit)
        by_kernel = submission.run_torch_fp16(_clone(data), problem)
        for g, (x, y) in enumerate(zip(by_kernel, by_torch)):
            assert torch.equal(torch.isnan(x), torch.isnan(y)), g
            assert torch.equal(x.nan_to_num().view(torch.int16), y.nan_to_num().view(torch.int16)), g

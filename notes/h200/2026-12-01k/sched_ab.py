"""A/B of host schedules on the same compiled kernels (eleventh session): whole tiles,
stream_k_units and balanced_units, with the model's constants or others. Leaderboard
timing (15 inputs, L2 flushed, one event pair), each variant checked against the
reference once; variants alternate, ROUNDS rounds.
    python notes/h200/2026-12-01k/sched_ab.py [ROUNDS]"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

import eval as ev  # noqa: E402
import reference  # noqa: E402
import submission as S  # noqa: E402
from tests.cases import task_cases  # noqa: E402

ORIG_WS = S.sm90_work_schedule
MEASURED_128 = (0.847, 0.765, 0.587)  # tools/sm90_ktile_cost.py, ninth session


def work_schedule(gen, model):
    def ws(sizes, cfg, num_sms):
        if not cfg.stream_k:
            return ORIG_WS(sizes, cfg, num_sms)
        rows = S.build_tile_schedule(sizes, cfg.tile_m, cfg.tile_n)
        rows, phase_sizes = S.split_tiles_by_width(rows, sizes, cfg.widths)
        k_tiles = [k // S.SM90_PACKED_K_TILE for _, _, k, _ in sizes]
        kt, unit, fix = S.sm90_cost_model(cfg)
        if model is not None:
            kt, unit, fix = model
        return gen(rows, phase_sizes, k_tiles, num_sms, kt, unit, fix)
    return ws


def variants(shape):
    tn = 128 if shape >= 2 else 256
    whole = S.make_sm90_config(tn, narrow=(96, 64))
    sk = S.make_sm90_config(tn, narrow=(96, 64), stream_k=True)
    v = {"whole": (whole, None, None), "stream_k": (sk, S.stream_k_units, None),
         "balanced": (sk, S.balanced_units, None)}
    if tn == 128:
        v["balanced measured kt, 1.0/0.8"] = (sk, S.balanced_units, (MEASURED_128, 1.0, 0.8))
        v["balanced measured kt, 2.5/2.0"] = (sk, S.balanced_units, (MEASURED_128, 2.5, 2.0))
    return v


def small_grid_check():
    """balanced_units on tiny grids (3 and 7 CTAs: CTAs hold several PARTIALs or a FIXUP
    after whole tiles), both tile widths, against the reference."""
    S.sm90_work_schedule = work_schedule(S.balanced_units, None)
    # long full tiles (K 2048) against short ones, so that tiny grids split too
    m, n, k = (128, 64, 200, 40), (512, 512, 256, 384), (2048, 256, 1024, 256)
    data = reference.generate_input(m=m, n=n, k=k, g=len(m), seed=5)
    expected = reference.ref_kernel(ev._clone_data(data))
    problem = S.validate_inputs(data)
    for grid in (3, 7, 11, 132):
        for tn in (128, 256):
            cfg = S.make_sm90_config(tn, narrow=(96, 64), stream_k=True)
            runner = S.GroupedGemmRunner(S.sm90_backend(), num_sms=grid)
            out = runner.run(data, problem, cfg)
            torch.cuda.synchronize()
            ws = S.sm90_work_schedule([(a, b, c, 1) for a, b, c in zip(m, n, k)], cfg, grid)
            ok = all(torch.allclose(o, e, rtol=1e-3, atol=1e-3) for o, e in zip(out, expected))
            print(f"small grid {grid:3d} tile_n {tn}: slots {ws.num_slots:3d} {'ok' if ok else 'MISMATCH'}", flush=True)
    S.sm90_work_schedule = ORIG_WS


def time_variant(runner, cfg, ws, data_list, ref):
    """(event us per call, split slots, matches the reference) of config cfg with work
    schedule ws on the 15 inputs, through custom_kernel and the process's sm90 runner."""
    # the runner's backend holds the chooser it was built with: replace it there
    # (run 2's first try patched S.choose_sm90_config and timed one config 5 times)
    runner.backend = S.dataclasses.replace(runner.backend, choose_config=lambda sizes, num_sms=0: cfg)
    S.sm90_work_schedule = ws
    for cache in (runner.plans, runner.schedules, runner.pointers, runner.calls):
        cache.clear()
    S._last_runner = None
    out = S.custom_kernel(data_list[0])
    ok = all(torch.allclose(o, e, rtol=1e-3, atol=1e-3) for o, e in zip(out, ref))
    for data in data_list[1:]:  # every input seen once before timing, as eval.py does
        S.custom_kernel(data)
    assert S._last_runner is runner
    sched = next(iter(runner.schedules._data.values()))
    stats = ev.time_calls(S.custom_kernel, data_list, False, None, 30, 2e9)
    return stats.mean / 1e3, sched.host.num_flags // 2, ok


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    small_grid_check()
    shapes = [2, 1, 0]
    cases = task_cases("benchmarks")
    results = {}
    for r in range(rounds):
        for shape in shapes:
            test = ev.TestCase(dict(cases[shape].args()), "")
            data_list = ev._benchmark_inputs(test)
            ref = reference.ref_kernel(ev._clone_data(data_list[0]))
            for name, (cfg, gen, model) in variants(shape).items():
                runner = S.get_runner(torch.device("cuda", 0), "sm90")
                us, slots, ok = time_variant(runner, cfg, work_schedule(gen, model) if gen else ORIG_WS,
                                             data_list, ref)
                results.setdefault((shape, name), []).append(us)
                print(f"round {r} shape {shape} {name:34s} {us:7.2f} us  slots {slots:3d} {'ok' if ok else 'MISMATCH'}", flush=True)
    print("\nsummary (mean us per round):")
    for (shape, name), t in results.items():
        print(f"  shape {shape} {name:34s} " + " / ".join(f"{x:.2f}" for x in t))


if __name__ == "__main__":
    main()

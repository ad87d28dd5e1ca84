"""Small cases checked bit-exactly against the reference, for compute-sanitizer:
    compute-sanitizer --tool memcheck python tools/sanitize_case.py [case_decode ...]

1. custom_kernel on G = 2 (M = 40 / 129): one tile per CTA, both schedule phases.
2. G = 4 through a runner with a 2-CTA grid: each CTA walks many tiles of both phases, so
   the pipelines' state crosses tile and phase boundaries under the sanitizer.
3. The same at tile_n = 256 on Hopper (two m64 wgmma blocks per consumer warpgroup).
4. Hopper K-range at tile_n = 256 on a 3-CTA grid: split tiles, so partial sums cross
   CTAs through the workspace and its flags (checked at rtol = atol = 1e-3: the split
   changes the fp32 summation order).
5. Hopper K-range at tile_n = 192 (three consumer warpgroups, the third decoding no
   tokens but taking part in the token ring) on a 3-CTA grid, three token-width phases.
6. Hopper split pieces at tile_n = 128 on an 11-CTA grid, where the 10 tiles are one wave:
   balanced_units moves the heads of the 4 long tiles to 4 CTAs that each run a whole tile
   after their PARTIAL.
7. Hopper K-range at tile_n = 192 with 96-row token tiles (all three consumer warpgroups
   decode tokens; a token tile's scales span two 128-row atoms) on a 3-CTA grid, three
   token-width phases.
8. The decode configs (Hopper: 32-token tiles with a width-16 phase on a 2-CTA grid;
   Blackwell: MMA N = 32 through custom_kernel).

Needs a CUDA GPU. Names select cases (default: all); exit status 0 when every case is
bit-exact (the split cases: within 1e-3), 1 otherwise.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

CASE_NAMES = ("case_custom_kernel", "case_small_grid", "case_one_block", "case_k_range",
              "case_three_wgs", "case_balanced", "case_tile_m_96", "case_decode",
              "case_weights_early")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tools/sanitize_case.py",
        description="Small cases checked bit-exactly against the reference, for "
                    "compute-sanitizer (memcheck, racecheck).",
        epilog="Needs a CUDA GPU (the kernel path of an sm_90 or sm_100 GPU, or the torch path "
               "on another).")
    parser.add_argument("cases", nargs="*", metavar="CASE",
                        help=f"cases to run (default: all): {', '.join(CASE_NAMES)}")
    args = parser.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASE_NAMES]
    if unknown:
        parser.error(f"no such case: {', '.join(unknown)} (cases: {', '.join(CASE_NAMES)})")
    return args


if __name__ == "__main__":
    ARGS = parse_args()  # before torch loads: --help and a wrong name answer at once

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import reference  # noqa: E402
import submission  # noqa: E402
from tests.cases import sm90_made_fields  # noqa: E402


def expected_of(data):
    return [c.clone() for c in reference.ref_kernel(([tuple(t.clone() for t in g) for g in data[0]], data[1], data[2], data[3]))]


def case_custom_kernel():
    data = reference.generate_input(m=(40, 129), n=(256, 128), k=(256, 512), g=2, seed=3)
    expected = expected_of(data)
    return submission.custom_kernel(data), expected


def case_small_grid(num_sms=2, **config_changes):
    data = reference.generate_input(m=(40, 200, 129, 64), n=(256, 256, 128, 128), k=(512, 256, 256, 256), g=4, seed=5)
    expected = expected_of(data)
    path = submission.select_path(torch.device("cuda"))
    runner = submission.GroupedGemmRunner(submission._BACKENDS[path](), num_sms=num_sms)
    problem = submission.validate_inputs(data)
    config, reason = runner.plan(problem)
    assert config is not None, reason
    config = dataclasses.replace(config, **config_changes)
    return runner.run(data, problem, config), expected


def case_one_block():
    if submission.select_path(torch.device("cuda")) != "sm90":
        return case_small_grid()
    return case_small_grid(**sm90_made_fields(submission, 256))


def case_k_range():
    if submission.select_path(torch.device("cuda")) != "sm90":
        return case_small_grid()
    return case_small_grid(3, **sm90_made_fields(submission, 256, split_k=True))


def case_three_wgs():
    if submission.select_path(torch.device("cuda")) != "sm90":
        return case_small_grid()
    return case_small_grid(3, **sm90_made_fields(submission, 192, split_k=True, narrow=(96, 64)))


def case_tile_m_96():
    if submission.select_path(torch.device("cuda")) != "sm90":
        return case_small_grid()
    return case_small_grid(3, **sm90_made_fields(submission, 192, tile_m=96, narrow=(64, 32), split_k=True))


def case_balanced():
    if submission.select_path(torch.device("cuda")) != "sm90":
        return case_small_grid()
    data = reference.generate_input(m=(128, 64, 40), n=(512, 512, 256), k=(2048, 256, 1024), g=3, seed=6)
    expected = expected_of(data)
    runner = submission.GroupedGemmRunner(submission.sm90_backend(), num_sms=11)
    cfg = submission.make_sm90_config(128, split_k=True)
    assert submission.sm90_work_schedule(submission.validate_inputs(data).sizes, cfg, 11).num_slots == 4
    return runner.run(data, submission.validate_inputs(data), cfg), expected


def _sm90_decode_tile(seed: int, **config_changes):
    """Hopper's 32-token decode tile (width-16 phase) forced on a 2-CTA grid, token tiles
    0-6 of a 200-row group among its groups."""
    data = reference.generate_input(m=(1, 7, 32, 200, 16), n=(256, 512, 128, 256, 384), k=(512, 256, 256, 512, 768),
                                    g=5, seed=seed)
    expected = expected_of(data)
    runner = submission.GroupedGemmRunner(submission.sm90_backend(), num_sms=2)
    cfg = submission.make_sm90_config(256, **submission.SM90_DECODE_TILE, **config_changes)
    return runner.run(data, submission.validate_inputs(data), cfg), expected


def case_decode():
    """The decode configs: Hopper's decode tile (_sm90_decode_tile); on Blackwell
    custom_kernel's own choice for groups of at most 32 tokens (MMA N = 32)."""
    if submission.select_path(torch.device("cuda")) != "sm90":
        data = reference.generate_input(m=(1, 7, 32, 16), n=(256, 512, 128, 384), k=(512, 256, 256, 768), g=4, seed=8)
        expected = expected_of(data)
        return submission.custom_kernel(data), expected
    return _sm90_decode_tile(8)


def case_weights_early():
    """weights_early (the stage released in the first group of a K-tile): tile_n 128 split
    along K on 3 CTAs and the decode tile on 2 (on Blackwell, the small grid)."""
    if submission.select_path(torch.device("cuda")) != "sm90":
        return case_small_grid()
    out, expected = case_small_grid(3, **sm90_made_fields(submission, 128, split_k=True, weights_early=True))
    decoded, decoded_expected = _sm90_decode_tile(9, weights_early=True)
    return [*out, *decoded], [*expected, *decoded_expected]


SPLIT = (case_k_range, case_three_wgs, case_balanced, case_tile_m_96, case_weights_early)
CASES = (case_custom_kernel, case_small_grid, case_one_block, case_k_range, case_three_wgs, case_balanced,
         case_tile_m_96, case_decode, case_weights_early)
assert tuple(c.__name__ for c in CASES) == CASE_NAMES


def main(names: list[str]) -> int:
    if not torch.cuda.is_available():
        print("tools/sanitize_case.py: needs a CUDA GPU; torch sees none", file=sys.stderr)
        return 2
    ok = True
    for case in [c for c in CASES if not names or c.__name__ in names]:
        out, expected = case()
        torch.cuda.synchronize()
        exact = all(torch.equal(o, e) for o, e in zip(out, expected))
        close = all(torch.allclose(o.float(), e.float(), rtol=1e-3, atol=1e-3) for o, e in zip(out, expected))
        ok &= exact or (case in SPLIT and close)
        verdict = "bit-exact" if exact else "within 1e-3" if close else "MISMATCH"
        print(case.__name__, "path", submission.select_path(torch.device("cuda")), verdict)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(ARGS.cases))

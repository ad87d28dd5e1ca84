"""A call's inputs checked against its problem sizes: validate_inputs -> GroupedProblem, or a
ValueError that names the group and the field."""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Sequence
from itertools import chain

import torch

from .common import SF_VEC_SIZE
from .formats import _blocked_scale_shape, _blocked_scale_strides

_FP4_DTYPES = (torch.float4_e2m1fn_x2, torch.uint8)


@dataclasses.dataclass(frozen=True)
class GroupedProblem:
    """A validated call: sizes per group and the device everything lives on.

    `kernel_layout` is True when every tensor has the dense layout the TMA-based kernels
    address (K-major A/B rows, N-contiguous C rows, the blocked scale allocation) and A, B
    and both scales start on 16 bytes (TMA and bulk copies fault on anything else); else
    `layout_issue` names the first group and field that break it. The exact torch path
    takes any strides. `c_misaligned` names the first C that no TMA store can address (not
    16-byte aligned): the Hopper kernel stores such a C element by element, the Blackwell
    kernel does not take it.
    """

    sizes: tuple[tuple[int, int, int, int], ...]
    device: torch.device
    kernel_layout: bool
    layout_issue: str = ""
    c_misaligned: str = ""


def _fail(group: int, field: str, message: str) -> None:
    raise ValueError(f"group {group}: field '{field}': {message}")


def _size_value(g: int, name: str, value) -> int:
    """An integer size (a Python int, or any integer type with __index__, as numpy's); a
    bool, float or string is an error naming the group and the size."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        _fail(g, "problem_sizes", f"{name} = {value!r} is not an integer")
    return operator.index(value)


def _check_sizes(g: int, size: Sequence[int]) -> tuple[int, int, int, int]:
    if not isinstance(size, (tuple, list)) or len(size) != 4:
        _fail(g, "problem_sizes", f"expected (M, N, K, L), got {tuple(size) if isinstance(size, (tuple, list)) else size!r}")
    m, n, k, l = (_size_value(g, name, v) for name, v in zip("MNKL", size))
    if l != 1:
        _fail(g, "problem_sizes", f"L = {l}; only L == 1 is supported")
    if m < 0 or n < 0:
        _fail(g, "problem_sizes", f"M = {m}, N = {n}; sizes must not be negative")
    if k <= 0 or k % SF_VEC_SIZE != 0:
        _fail(g, "problem_sizes", f"K = {k} must be a positive multiple of {SF_VEC_SIZE}")
    return m, n, k, l


def _check_tensor(g, field, t, dtypes, shape, device) -> None:
    if not isinstance(t, torch.Tensor):
        _fail(g, field, f"expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        names = " or ".join(str(d) for d in dtypes)
        _fail(g, field, f"dtype {t.dtype}, expected {names}")
    if t.shape != shape:  # a torch.Size compares with a tuple as a tuple
        _fail(g, field, f"shape {tuple(t.shape)}, expected {shape} from problem_sizes")
    if t.device != device:
        _fail(g, field, f"on {t.device}, but group 0's 'a' is on {device}; mixed devices")


def tensor_fields(data) -> list | None:
    """(address, dtype, shape, strides) of every tensor the kernels touch, in the order
    a, b, c of each group, then sfa, sfb of each group; None where data is not made of
    tensors with storage. Reading 5 x G tensors' metadata is most of the cost of both a
    layout key (GroupedGemmRunner.layout_key) and validation, so a call that needs both
    reads it once."""
    try:
        abc, _, sfr, _ = data
        return [(t.data_ptr(), t.dtype, t.shape, t.stride()) for t in chain(*abc, *sfr)]
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None


@functools.lru_cache(maxsize=256)
def _scale_layout(rows: int, k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return _blocked_scale_shape(rows, k), _blocked_scale_strides(rows, k)


def _plain_group(size, abc, sfr, fields, device):
    """((M, N, K, L), dense, c_aligned) of a group whose fields need no message: Python int
    sizes within the rules and five tensors on `device` of the expected dtypes and shapes
    (`fields`: their tensor_fields entries); `dense` and `c_aligned` as _layout_issue and the
    C alignment test decide. None for anything else, which the per-field checks then take
    (they accept a superset of this, numpy integer sizes for one, and raise the message)."""
    if type(size) not in (tuple, list) or len(size) != 4:
        return None
    m, n, k, l = size
    if not (type(m) is int and type(n) is int and type(k) is int and type(l) is int and l == 1
            and m >= 0 and n >= 0 and k > 0 and k % SF_VEC_SIZE == 0):
        return None
    if type(abc) not in (tuple, list) or len(abc) != 3 or type(sfr) not in (tuple, list) or len(sfr) != 2:
        return None
    for t in chain(abc, sfr):
        if not isinstance(t, torch.Tensor) or t.device != device:
            return None
    (pa, da, sa, ta), (pb, db, sb, tb), (pc, dc, sc, tc), (psa, dsa, ssa, tsa), (psb, dsb, ssb, tsb) = fields
    kh = k // 2
    sfa_shape, sfa_strides = _scale_layout(m, k)
    sfb_shape, sfb_strides = _scale_layout(n, k)
    if not (da in _FP4_DTYPES and db in _FP4_DTYPES and dc == torch.float16
            and dsa == torch.float8_e4m3fn and dsb == torch.float8_e4m3fn):
        return None
    if sa != (m, kh, l) or sb != (n, kh, l) or sc != (m, n, l) or ssa != sfa_shape or ssb != sfb_shape:
        return None
    dense = (ta[:2] == (kh, 1) and tb[:2] == (kh, 1) and tc[:2] == (n, 1) and tsa[:5] == sfa_strides
             and tsb[:5] == sfb_strides and not (pa % 16 or pb % 16 or psa % 16 or psb % 16))
    return (m, n, k, l), dense, pc % 16 == 0


def validate_inputs(data, fields: list | None = None) -> GroupedProblem:
    """Check a call's data against its problem_sizes; raise ValueError naming group and field.
    `fields`: tensor_fields(data) where the caller has read them in this same call.

    A group of plain Python int sizes and tensors as expected passes one test over its
    fields (_plain_group); any other group goes through the per-field checks, which say
    what is wrong. The CPU copies of the scales (data[1]) are not read by any path and are
    not checked.
    """
    if not isinstance(data, (tuple, list)) or len(data) != 4:
        raise ValueError("data must be (abc_tensors, sfasfb_tensors, sfasfb_reordered, sizes)")
    abc_tensors, _, sf_reordered, problem_sizes = data
    for name, part in (("abc_tensors", abc_tensors), ("sfasfb_reordered", sf_reordered),
                       ("problem_sizes", problem_sizes)):
        if not isinstance(part, (tuple, list)):
            raise ValueError(f"{name} must be a list with one entry per group, got {type(part).__name__}")
    num_groups = len(problem_sizes)
    if num_groups == 0:
        raise ValueError("empty group list: problem_sizes has no groups")
    if len(abc_tensors) != num_groups or len(sf_reordered) != num_groups:
        raise ValueError(
            f"{num_groups} problem sizes but {len(abc_tensors)} (a, b, c) tuples and "
            f"{len(sf_reordered)} reordered scale tuples"
        )
    first = abc_tensors[0][0] if isinstance(abc_tensors[0], (tuple, list)) and abc_tensors[0] else None
    device = first.device if isinstance(first, torch.Tensor) else None
    if fields is None:
        fields = tensor_fields(data)
    if fields is not None and len(fields) != 5 * num_groups:
        fields = None  # not 3 + 2 tensors a group: the per-field checks say where
    sizes = []
    layout_issue = c_misaligned = ""
    for g in range(num_groups):
        plain = None
        if fields is not None:
            group_fields = (*fields[3 * g:3 * g + 3], *fields[3 * num_groups + 2 * g:3 * num_groups + 2 * g + 2])
            plain = _plain_group(problem_sizes[g], abc_tensors[g], sf_reordered[g], group_fields, device)
        if plain is not None:
            size, dense, c_aligned = plain
            if not dense and not layout_issue:
                a, b, c = abc_tensors[g]
                layout_issue = _layout_issue(g, a, b, c, *sf_reordered[g], *size[:3])
            if not c_aligned and not c_misaligned:
                c_misaligned = f"group {g}: c starts at {fields[3 * g + 2][0] % 16} bytes past a 16-byte boundary"
            sizes.append(size)
            continue
        m, n, k, l = _check_sizes(g, problem_sizes[g])
        if not isinstance(abc_tensors[g], (tuple, list)) or len(abc_tensors[g]) != 3:
            _fail(g, "abc_tensors", "expected an (a, b, c) tuple")
        if not isinstance(sf_reordered[g], (tuple, list)) or len(sf_reordered[g]) != 2:
            _fail(g, "sfasfb_reordered", "expected an (sfa, sfb) tuple")
        a, b, c = abc_tensors[g]
        sfa, sfb = sf_reordered[g]
        _check_tensor(g, "a", a, _FP4_DTYPES, (m, k // 2, l), device)
        _check_tensor(g, "b", b, _FP4_DTYPES, (n, k // 2, l), device)
        _check_tensor(g, "c", c, (torch.float16,), (m, n, l), device)
        _check_tensor(g, "sfa_reordered", sfa, (torch.float8_e4m3fn,), _blocked_scale_shape(m, k), device)
        _check_tensor(g, "sfb_reordered", sfb, (torch.float8_e4m3fn,), _blocked_scale_shape(n, k), device)
        if not layout_issue:
            layout_issue = _layout_issue(g, a, b, c, sfa, sfb, m, n, k)
        if not c_misaligned and c.data_ptr() % 16:
            c_misaligned = f"group {g}: c starts at {c.data_ptr() % 16} bytes past a 16-byte boundary"
        sizes.append((m, n, k, l))
    return GroupedProblem(tuple(sizes), device, not layout_issue, layout_issue, c_misaligned)


def _layout_issue(g, a, b, c, sfa, sfb, m, n, k) -> str:
    """Why group g's tensors are not what the kernels' TMA descriptors and bulk copies can
    address, or "" when they are."""
    strides = (("a", a, (k // 2, 1)), ("b", b, (k // 2, 1)), ("c", c, (n, 1)),
               ("sfa_reordered", sfa, _blocked_scale_strides(m, k)),
               ("sfb_reordered", sfb, _blocked_scale_strides(n, k)))
    for field, t, dense in strides:
        if t.stride()[:len(dense)] != dense:
            return f"group {g}: {field} has strides {t.stride()}, not the dense {dense}"
    for field, t in (("a", a), ("b", b), ("sfa_reordered", sfa), ("sfb_reordered", sfb)):
        if t.data_ptr() % 16:
            return f"group {g}: {field} starts at {t.data_ptr() % 16} bytes past a 16-byte boundary"
    return ""

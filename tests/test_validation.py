"""Every malformed input gets a ValueError naming the group and the field."""

import re

import pytest
import torch

import reference
from nvfp4_gemm import dispatch, inputs


def _data(seed=1, m=(64, 96), n=(128, 256), k=(256, 512)):
    return reference.generate_input(m=m, n=n, k=k, g=len(m), seed=seed)


def _replace(data, group, field, value):
    abc, sf, sfr, sizes = (list(x) for x in data)
    a, b, c = abc[group]
    sfa, sfb = sfr[group]
    parts = {"a": a, "b": b, "c": c, "sfa_reordered": sfa, "sfb_reordered": sfb}
    parts[field] = value
    abc[group] = (parts["a"], parts["b"], parts["c"])
    sfr[group] = (parts["sfa_reordered"], parts["sfb_reordered"])
    return (abc, sf, sfr, sizes)


def _with_sizes(data, group, size):
    sizes = list(data[3])
    sizes[group] = size
    return (data[0], data[1], data[2], sizes)


def _raises(data, pattern):
    with pytest.raises(ValueError, match=pattern):
        dispatch.custom_kernel(data)


def test_empty_group_list():
    _raises(([], [], [], []), "empty group list")


def test_list_length_mismatch():
    d = _data()
    _raises((d[0][:1], d[1], d[2], d[3]), "2 problem sizes but 1")


def test_l_not_one():
    _raises(_with_sizes(_data(), 1, (96, 256, 512, 2)), r"group 1: field 'problem_sizes': L = 2")


@pytest.mark.parametrize("size,what", [((-1, 128, 256, 1), "negative"), ((64, -5, 256, 1), "negative")])
def test_negative_sizes(size, what):
    _raises(_with_sizes(_data(), 0, size), rf"group 0: field 'problem_sizes'.*{what}")


@pytest.mark.parametrize("k", [0, -256, 100])
def test_k_not_positive_multiple_of_16(k):
    _raises(_with_sizes(_data(), 0, (64, 128, k, 1)), rf"group 0: field 'problem_sizes': K = {k}")


@pytest.mark.parametrize("size, what", [(("64", 128, 256, 1), "M = '64'"), ((64, 128.0, 256, 1), "N = 128.0"),
                                        ((64, 128, "x", 1), "K = 'x'"), ((64, 128, 256, True), "L = True")])
def test_sizes_that_are_not_integers(size, what):
    _raises(_with_sizes(_data(), 1, size), rf"group 1: field 'problem_sizes': {re.escape(what)} is not an integer")


def _expected(data):
    """The reference's result on copies of data's c tensors (data's own stay untouched)."""
    abc = [(a, b, c.clone()) for a, b, c in data[0]]
    return [c.clone() for c in reference.ref_kernel((abc, data[1], data[2], data[3]))]


def _nan_c(data):
    """data with every c filled with NaN: a call that does not compute leaves it so."""
    for _, _, c in data[0]:
        c.fill_(float("nan"))
    return data


def test_numpy_integer_sizes_are_taken():
    np = pytest.importorskip("numpy")
    d = _nan_c(_data())
    sizes = [tuple(np.int64(v) for v in s) for s in d[3]]
    expected = _expected(d)
    out = dispatch.custom_kernel((d[0], d[1], d[2], sizes))
    assert len(out) == 2 and all(torch.equal(o, e) for o, e in zip(out, expected))


def test_sizes_not_four_values():
    _raises(_with_sizes(_data(), 0, (64, 128, 256)), r"group 0: field 'problem_sizes': expected \(M, N, K, L\)")


def test_shape_inconsistent_with_problem_sizes():
    _raises(_with_sizes(_data(), 1, (96, 256, 256, 1)), r"group 1: field 'a': shape \(96, 256, 1\), expected \(96, 128, 1\)")
    _raises(_with_sizes(_data(), 0, (64, 256, 256, 1)), r"group 0: field 'b': shape")
    d = _data()
    _raises(_replace(d, 0, "c", d[0][0][2][:32]), r"group 0: field 'c': shape \(32, 128, 1\)")


@pytest.mark.parametrize(
    "field,bad",
    [
        ("a", lambda t: t.view(torch.int8)),
        ("b", lambda t: t.view(torch.int8)),
        ("c", lambda t: t.float()),
        ("sfa_reordered", lambda t: t.view(torch.uint8)),
        ("sfb_reordered", lambda t: t.float()),
    ],
)
def test_wrong_dtype(field, bad):
    d = _data()
    index = {"a": (0, 0), "b": (0, 1), "c": (0, 2), "sfa_reordered": (2, 0), "sfb_reordered": (2, 1)}[field]
    tensor = d[index[0]][1][index[1]]
    _raises(_replace(d, 1, field, bad(tensor)), rf"group 1: field '{field}': dtype")


def test_wrong_scale_shape():
    d = _data()
    sfa = d[2][1][0]
    _raises(_replace(d, 1, "sfa_reordered", sfa[:, :, :, :, :1]), r"group 1: field 'sfa_reordered': shape")


def test_not_a_tensor():
    d = _data()
    _raises(_replace(d, 0, "b", [1, 2, 3]), r"group 0: field 'b': expected a torch.Tensor, got list")


def test_bad_tuples():
    d = _data()
    abc = list(d[0])
    abc[1] = abc[1][:2]
    _raises((abc, d[1], d[2], d[3]), r"group 1: field 'abc_tensors'")


def test_mixed_devices():
    d = _data()
    # A 'meta' tensor stands in for another device; the check runs before any compute.
    meta_c = torch.empty((96, 256, 1), dtype=torch.float16, device="meta")
    _raises(_replace(d, 1, "c", meta_c), r"group 1: field 'c': on meta.*mixed devices")


def test_data_not_a_4_tuple():
    _raises(([], []), re.escape("data must be (abc_tensors"))


def test_non_dense_strides_still_correct():
    """A strided (non-contiguous) but valid input is computed correctly by a path that takes it."""
    d = _data(m=(64,), n=(128,), k=(256,))
    a = d[0][0][0]
    wide = torch.zeros((64, 256, 1), dtype=torch.uint8)
    wide[:, :128] = a.view(torch.uint8)
    strided_a = wide[:, :128].view(torch.float4_e2m1fn_x2)
    assert strided_a.stride()[:2] == (256, 1)
    problem = inputs.validate_inputs(_replace(d, 0, "a", strided_a))
    assert not problem.kernel_layout
    expected = _expected(d)[0]  # on the dense a, into a copy of c
    got = dispatch.custom_kernel(_replace(_nan_c(d), 0, "a", strided_a))[0]
    assert got is d[0][0][2] and torch.equal(got, expected)


def _offset_copy(t, offset_bytes):
    """t (a 1-byte dtype) copied into a buffer that starts offset_bytes past a 16-byte
    boundary, with t's shape and strides."""
    nbytes = t.untyped_storage().nbytes()
    flat = torch.zeros(nbytes + 16, dtype=torch.uint8)
    out = flat[offset_bytes:offset_bytes + nbytes].view(t.dtype)
    out = out.as_strided(t.shape, t.stride(), out.storage_offset() + t.storage_offset())
    out.copy_(t)
    return out


@pytest.mark.parametrize("field", ["a", "b", "sfa_reordered", "sfb_reordered"])
def test_unaligned_operand_names_group_and_field_and_stays_correct(field):
    d = _data(m=(64, 96))
    src = dict(zip(("a", "b", "c"), d[0][1])) | dict(zip(("sfa_reordered", "sfb_reordered"), d[2][1]))
    moved = _offset_copy(src[field], 2)
    assert moved.data_ptr() % 16 == 2 and torch.equal(moved.view(torch.uint8), src[field].view(torch.uint8))
    data = _replace(d, 1, field, moved)
    problem = inputs.validate_inputs(data)
    assert not problem.kernel_layout
    assert problem.layout_issue == f"group 1: {field} starts at 2 bytes past a 16-byte boundary"
    expected = [c.clone() for c in reference.ref_kernel(_replace(_data(m=(64, 96)), 1, field, moved))]
    got = dispatch.custom_kernel(data)
    assert all(torch.equal(g, e) for g, e in zip(got, expected))


def test_unaligned_c_is_noted_but_keeps_the_kernel_layout():
    d = _data(m=(64, 96))
    c = d[0][0][2]
    flat = torch.zeros(c.numel() + 1, dtype=c.dtype)
    data = _replace(d, 0, "c", flat[1:].view(c.shape))
    problem = inputs.validate_inputs(data)
    assert problem.kernel_layout and problem.layout_issue == ""
    assert problem.c_misaligned == "group 0: c starts at 2 bytes past a 16-byte boundary"


def test_strided_operand_names_group_and_field():
    d = _data(m=(64,), n=(128,), k=(256,))
    wide = torch.zeros((64, 256, 1), dtype=torch.uint8)
    strided_a = wide[:, :128].view(torch.float4_e2m1fn_x2)
    problem = inputs.validate_inputs(_replace(d, 0, "a", strided_a))
    assert problem.layout_issue.startswith("group 0: a has strides (256, 1, ")


def _variants():
    """Calls for test_the_plain_pass_decides_as_the_per_field_checks: valid ones (dense,
    strided, misaligned, numpy and list sizes, an empty group) and one of each kind of bad
    field, in group 1 of 3 and in group 0."""
    d = _data(m=(64, 96, 0), n=(128, 256, 128), k=(256, 512, 256))
    a, b, c = d[0][1]
    sfa, sfb = d[2][1]
    wide = torch.zeros((96, 512, 1), dtype=torch.uint8)
    yield "valid", d
    yield "strided a", _replace(d, 1, "a", wide[:, :256].view(torch.float4_e2m1fn_x2))
    yield "misaligned sfb", _replace(d, 1, "sfb_reordered", _offset_copy(sfb, 2))
    flat = torch.zeros(c.numel() + 1, dtype=c.dtype)
    yield "misaligned c", _replace(d, 1, "c", flat[1:].view(c.shape))
    yield "sizes as lists", (d[0], d[1], d[2], [list(s) for s in d[3]])
    np = pytest.importorskip("numpy")
    yield "numpy sizes", _with_sizes(d, 1, tuple(np.int64(v) for v in d[3][1]))
    for g in (0, 1):
        m, n, k, _ = d[3][g]
        for size in ((m, n, k, 2), (m, n, k + 8, 1), (m, n, k, True), (m, n, k), (m, n, float(k), 1),
                     (m, n, 2 * k, 1), (-1, n, k, 1)):
            yield f"group {g} sizes {size}", _with_sizes(d, g, size)
        ga, gb, gc = d[0][g]
        gsfa, gsfb = d[2][g]
        yield f"group {g} a as int8", _replace(d, g, "a", ga.view(torch.int8))
        yield f"group {g} c as float", _replace(d, g, "c", gc.float())
        yield f"group {g} sfb as uint8", _replace(d, g, "sfb_reordered", gsfb.view(torch.uint8))
        yield f"group {g} short sfa", _replace(d, g, "sfa_reordered", gsfa[:, :, :, :, :1])
        yield f"group {g} b a list", _replace(d, g, "b", [1, 2])
        yield f"group {g} sfa row-major", _replace(d, g, "sfa_reordered", gsfa.contiguous())
        yield f"group {g} sfb row-major", _replace(d, g, "sfb_reordered", gsfb.contiguous())
        yield f"group {g} c strided", _replace(d, g, "c", torch.zeros((m, 2 * n, 1), dtype=gc.dtype)[:, :n])
        yield f"group {g} c on meta", _replace(d, g, "c", torch.empty(gc.shape, dtype=gc.dtype, device="meta"))
        short = list(d[0])
        short[g] = short[g][:2]
        yield f"group {g} abc of two", (short, d[1], d[2], d[3])
        long_sf = list(d[2])
        long_sf[g] = (*long_sf[g], gsfa)
        yield f"group {g} three scales", (d[0], d[1], long_sf, d[3])


def _outcome(data):
    try:
        return inputs.validate_inputs(data)
    except ValueError as e:
        return f"ValueError: {e}"


def test_the_plain_pass_decides_as_the_per_field_checks(monkeypatch):
    """validate_inputs' one-test pass over plain groups (_plain_group) gives the problem,
    layout issue and C note that the per-field checks give, and leaves every error to them:
    each variant's outcome is the same with the plain pass and with it turned off. The pass
    must take the plain groups, or it saves nothing."""
    variants = list(_variants())
    plain_calls = []
    plain_group = inputs._plain_group
    monkeypatch.setattr(inputs, "_plain_group", lambda *a: plain_calls.append(r := plain_group(*a)) or r)
    with_pass = {name: _outcome(data) for name, data in variants}
    assert sum(r is not None for r in plain_calls) >= 3 * 5  # every group of the valid variants
    monkeypatch.setattr(inputs, "_plain_group", lambda *a: None)
    without = {name: _outcome(data) for name, data in variants}
    for name, _ in variants:
        assert with_pass[name] == without[name], name
    assert isinstance(with_pass["valid"], inputs.GroupedProblem) and with_pass["valid"].kernel_layout
    assert with_pass["misaligned c"].c_misaligned and with_pass["strided a"].layout_issue
    assert with_pass["group 1 c as float"].startswith("ValueError: group 1: field 'c': dtype")

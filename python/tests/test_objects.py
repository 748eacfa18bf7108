# SPDX-License-Identifier: Apache-2.0
"""The binding itself: struct layouts and version checked at import, tensors and their dtype
conversions, host arrays in place, errors carrying the library's sentence, objects that keep
their context alive whatever order they are collected in, and pyopencl buffers passed without
copies (required when FLASHCL_TEST_PYOPENCL=1, as in the test command)."""
import ctypes
import gc
import os

import numpy as np
import pytest
from conftest import rand
from reference import attention, attention_backward, max_err, within

import flashcl
from flashcl import _lib


def test_layouts_and_version():
    _lib.check_layouts(_lib.lib)  # also done at import
    assert flashcl.__version__.count(".") == 2
    assert _lib.lib.fcl_struct_layout(b"fcl_attn_params", b"no_such_field") == 2**64 - 1


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i8", "i32"])
def test_tensor_round_trip(ctx, dtype):
    x = rand((3, 5, 7), 1) * (100 if dtype in ("i8", "i32") else 1)
    t = ctx.tensor(x, dtype)
    assert t.shape == (3, 5, 7) and t.dtype == dtype and t.strides == (35, 7, 1)
    got = t.numpy()
    if dtype == "f32":
        want = x
    elif dtype == "f16":
        want = x.astype(np.float16)
    elif dtype == "bf16":  # round to nearest even on the top 16 bits, checked independently
        u = x.view(np.uint32).astype(np.uint64)
        want = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    else:
        want = np.rint(x).astype(np.int8 if dtype == "i8" else np.int32)
    assert np.array_equal(got, want)


def test_bf16_tensors_in_attention(ctx):
    q, k, v = rand((1, 16, 2, 32), 5), rand((1, 16, 2, 32), 6), rand((1, 16, 2, 32), 7)
    out = flashcl.flash_attn_func(ctx.tensor(q, "bf16"), ctx.tensor(k, "bf16"), ctx.tensor(v, "bf16"))
    assert isinstance(out, flashcl.Tensor) and out.dtype == "bf16"
    qb, kb, vb = (ctx.tensor(x, "bf16").numpy() for x in (q, k, v))
    ref, _ = attention(qb, kb, vb)
    assert max_err(out.numpy(), ref) < 2e-2  # bf16 output rounding (8 mantissa bits)


def test_host_array_in_place(ctx):
    """On CPU devices that share the host's memory (PoCL always) numpy arrays are the tensors'
    storage: an op's output is in the array once the queue is finished, before any sync."""
    if os.environ.get("FLASHCL_DEVICE", "").lower() in ("pocl", "intel"):
        assert ctx.in_place and ctx.host_alignment > 0
    if not ctx.in_place:
        pytest.skip("the device does not share the host's memory")
    q = rand((1, 16, 2, 32), 9)
    out = flashcl._core.aligned_empty(q.shape, np.float32, ctx.host_alignment)
    out[...] = np.nan
    tq, to = ctx.wrap_host(q), ctx.wrap_host(out)
    assert np.array_equal(tq.numpy(), q)
    p = _lib.AttnParams(0.0, 0, -1, -1, 0.0, None, None)
    _lib.check(_lib.lib.fcl_attention_forward(ctx.ptr, ctypes.byref(p), tq.ptr, tq.ptr, tq.ptr, to.ptr, None, None),
               ctx.ptr)
    ctx.finish()
    ref, _ = attention(q, q, q)
    assert max_err(out, ref) < 1e-5, "the output is not in the host array without a copy"
    to.sync()
    tq.release()
    to.release()


def test_errors_carry_the_sentence(ctx):
    q, k, v = rand((1, 8, 2, 32), 1), rand((1, 8, 2, 16), 2), rand((1, 8, 2, 16), 3)
    with pytest.raises(flashcl.FlashCLError) as e:
        flashcl.flash_attn_func(q, k, v, context=ctx)
    assert e.value.status == "FCL_ERR_SHAPE" and e.value.code == -2
    assert "32" in e.value.message and "16" in e.value.message
    with pytest.raises(flashcl.FlashCLError) as e:
        flashcl.Context("no-such-device-anywhere")
    assert e.value.status == "FCL_ERR_NO_DEVICE" and "no-such-device-anywhere" in e.value.message
    cu = np.array([0, 9, 4], np.int32)
    with pytest.raises(flashcl.FlashCLError) as e:
        flashcl.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 9, 9, validate=True, context=ctx)
    assert e.value.status == "FCL_ERR_INVALID_ARGUMENT" and "cu_seqlens" in e.value.message


def test_tensor_outlives_its_context():
    c = flashcl.Context()
    x = rand((2, 3), 4)
    t = c.tensor(x)
    view = t.view((3,), None, 3)
    del c
    gc.collect()
    assert np.array_equal(t.numpy(), x) and np.array_equal(view.numpy(), x[1])
    c2 = t.context
    c2.cycle = [t, c2]  # a reference cycle: collected in any order
    del t, view, c2
    gc.collect()


PYOPENCL = os.environ.get("FLASHCL_TEST_PYOPENCL") == "1"


@pytest.fixture
def cl_queue():
    if not PYOPENCL:
        pytest.skip("FLASHCL_TEST_PYOPENCL is not 1")
    cl = pytest.importorskip("pyopencl")
    want = os.environ.get("FLASHCL_DEVICE", "pocl").lower()
    for p in cl.get_platforms():
        if want in p.name.lower() or want in p.vendor.lower():
            devs = p.get_devices()
            if devs:
                c = cl.Context([devs[0]])
                return cl.CommandQueue(c)
    pytest.fail(f"pyopencl finds no platform matching FLASHCL_DEVICE={want}")


def test_pyopencl_arrays_without_copies(cl_queue):
    import pyopencl.array as cla
    q, k, v = rand((1, 24, 2, 32), 1), rand((1, 24, 2, 32), 2), rand((1, 24, 2, 32), 3)
    dq, dk, dv = (cla.to_device(cl_queue, x) for x in (q, k, v))
    out = flashcl.flash_attn_func(dq, dk, dv, causal=True)
    assert isinstance(out, cla.Array) and out.context == cl_queue.context
    ref, _ = attention(q, k, v, causal=True)
    assert max_err(out.get(), ref) < 1e-5

    ctx = flashcl.Context.from_cl(cl_queue.context, cl_queue.device, cl_queue)
    t = ctx.wrap_pyopencl(dq)
    t.write(np.zeros_like(q))  # through flashcl's tensor ...
    assert not dq.get().any()  # ... into pyopencl's buffer: the same memory


def test_pyopencl_packed_qkv(cl_queue):
    """The fused-QKV calls on pyopencl arrays: qkv reshaped and split without copies, prefix sums
    read back from the device, results as pyopencl arrays."""
    import pyopencl.array as cla
    qkv, do = rand((2, 19, 3, 2, 32), 5), rand((2, 19, 2, 32), 6)
    d_qkv = cla.to_device(cl_queue, qkv)
    out = flashcl.flash_attn_qkvpacked_func(d_qkv, causal=True)
    assert isinstance(out, cla.Array) and out.shape == (2, 19, 2, 32)
    ref, _ = attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    assert max_err(out.get(), ref) < 1e-5
    cu = cla.to_device(cl_queue, np.array([0, 19, 38], np.int32))
    rows = flashcl.flash_attn_varlen_qkvpacked_func(cla.to_device(cl_queue, qkv.reshape(38, 3, 2, 32)), cu, 19,
                                                    causal=True)
    assert isinstance(rows, cla.Array) and max_err(rows.get().reshape(2, 19, 2, 32), ref) < 1e-5
    dqkv = flashcl.flash_attn_qkvpacked_backward(cla.to_device(cl_queue, do), d_qkv, causal=True)
    assert isinstance(dqkv, cla.Array) and dqkv.shape == qkv.shape
    parts = (qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], do)
    ref_grads = attention_backward(*parts, causal=True)
    naive_grads = attention_backward(*parts, causal=True, dtype=np.float32)
    for i, (r, n) in enumerate(zip(ref_grads, naive_grads)):
        assert within(max_err(dqkv.get()[:, :, i], r), max_err(n, r), 3.0), f"part {i}"

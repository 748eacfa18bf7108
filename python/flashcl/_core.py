# SPDX-License-Identifier: Apache-2.0
"""Contexts, tensors and the conversions between numpy / pyopencl arrays and flashcl tensors."""
from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._lib import DeviceInfo, check, lib

# fcl_dtype values
F32, F16, BF16, I8, I32 = 0, 1, 2, 3, 4
DTYPE_NAMES = {F32: "f32", F16: "f16", BF16: "bf16", I8: "i8", I32: "i32"}
_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}
_BY_NAME.update({"float32": F32, "float16": F16, "bfloat16": BF16, "int8": I8, "int32": I32})
# how each dtype is stored in numpy (BF16 as its 16 bits)
STORAGE = {F32: np.dtype(np.float32), F16: np.dtype(np.float16), BF16: np.dtype(np.uint16),
           I8: np.dtype(np.int8), I32: np.dtype(np.int32)}
_FROM_NUMPY = {np.dtype(np.float32): F32, np.dtype(np.float16): F16, np.dtype(np.int8): I8,
               np.dtype(np.int32): I32, np.dtype(np.float64): F32, np.dtype(np.int64): I32}

DType = Union[str, int]


def dtype_code(dtype: DType) -> int:
    """fcl_dtype of "f32" / "f16" / "bf16" / "i8" / "i32" (or the numpy names, or the code)."""
    if isinstance(dtype, int) and dtype in DTYPE_NAMES:
        return dtype
    try:
        return _BY_NAME[str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype]
    except (KeyError, TypeError):
        raise ValueError(f"unknown dtype {dtype!r} (f32, f16, bf16, i8 or i32)") from None


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bit patterns (uint16), rounded to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) as float32."""
    return (b.astype(np.uint32) << 16).view(np.float32)


def to_storage(x: np.ndarray, code: int) -> np.ndarray:
    """x converted to how `code` is stored (numpy's own conversion; BF16 by bits)."""
    if code == BF16:
        return to_bf16_bits(np.asarray(x, dtype=np.float32))
    if code in (I8, I32):
        info = np.iinfo(STORAGE[code])
        if x.dtype.kind == "f":  # as fcl_tensor_write_f32: nearest even, saturated, NaN -> 0
            return np.clip(np.rint(np.nan_to_num(x, nan=0.0)), info.min, info.max).astype(STORAGE[code])
        if x.size and (x.min() < info.min or x.max() > info.max):
            raise ValueError(f"integer values do not fit {STORAGE[code]}")
    return np.asarray(x, dtype=STORAGE[code])


def _i64(values: Sequence[int]):
    return (ctypes.c_int64 * len(values))(*values)


class _Handle:
    """An fcl_context shared by a Context and the Tensors made from it: released (after a final
    fcl_finish) when the last of them is gone, whatever order the garbage collector takes. Its
    lock serialises the calls on the context (a context is not to be used by two threads at once)."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
        self.refs = 1
        self.lock = threading.RLock()

    def acquire(self) -> "_Handle":
        with self.lock:
            self.refs += 1
        return self

    def release(self) -> None:
        with self.lock:
            self.refs -= 1
            if self.refs == 0 and self.ptr:
                lib.fcl_context_release(self.ptr)
                self.ptr = 0


def _release_tensor(handle: _Handle, ptr: int, finish: bool) -> None:
    with handle.lock:
        if finish and handle.ptr:
            lib.fcl_finish(handle.ptr)  # host memory under the tensor may be freed right after
        lib.fcl_tensor_release(ptr)
    handle.release()


class Context:
    """A device with its in-order queue, program cache and scratch memory (fcl_context).

    Context(device) opens the device a selector names: None uses FLASHCL_DEVICE, else the first
    GPU, else the first CPU; "gpu", "cpu", "pocl", "intel", "rusticl", "nvidia" or "P:D" as
    flashcl-info lists them. Context.from_cl wraps the caller's OpenCL objects (pyopencl's or raw
    handles). Tensors keep their context alive; the fcl_context is released after the last of
    them. Calls on one context are serialised by a lock. use_host_memory=False copies numpy
    arrays to and from device buffers even where they could be used in place."""

    def __init__(self, device: Optional[str] = None, *, use_host_memory: bool = True,
                 _ptr: Optional[int] = None) -> None:
        if _ptr is None:
            out = ctypes.c_void_p()
            check(lib.fcl_context_create(device.encode() if device else None, ctypes.byref(out)), None)
            _ptr = out.value
        self._handle = _Handle(_ptr)
        self._finalizer = weakref.finalize(self, self._handle.release)
        info = DeviceInfo()
        check(lib.fcl_context_device_info(_ptr, ctypes.byref(info)), _ptr)
        self.device_name: str = info.name.decode(errors="replace")
        self.platform_name: str = info.platform_name.decode(errors="replace")
        self.device_type: str = {1: "cpu", 2: "gpu", 3: "accelerator"}.get(info.type, "other")
        self.has_fp16: bool = bool(info.has_fp16)
        self.host_alignment: int = lib.fcl_host_alignment(_ptr)
        """Alignment at which host arrays are used in place (0: host memory is copied)."""
        self.use_host_memory = use_host_memory

    @classmethod
    def from_cl(cls, cl_context: Any, device: Any, queue: Any = None, *, use_host_memory: bool = True) -> "Context":
        """A context over existing OpenCL objects: pyopencl Context, Device and CommandQueue (an
        in-order one), or their raw handles as ints. They are retained until the context goes."""
        def handle(obj: Any) -> Optional[int]:
            return None if obj is None else int(getattr(obj, "int_ptr", obj))
        out = ctypes.c_void_p()
        check(lib.fcl_context_create_from_cl(handle(cl_context), handle(device), handle(queue), ctypes.byref(out)),
              None)
        return cls(use_host_memory=use_host_memory, _ptr=out.value)

    @property
    def ptr(self) -> int:
        """The fcl_context handle (valid while this object lives)."""
        return self._handle.ptr

    @property
    def in_place(self) -> bool:
        """Whether numpy arrays are passed in place (a CPU device that shares the host's memory,
        unless use_host_memory is False)."""
        return self.use_host_memory and self.device_type == "cpu" and self.host_alignment > 0

    def cl_handles(self) -> Tuple[int, int, int]:
        """The raw cl_context, cl_device_id and cl_command_queue handles (not retained)."""
        p = self.ptr
        return lib.fcl_context_cl_context(p), lib.fcl_context_cl_device(p), lib.fcl_context_cl_queue(p)

    def finish(self) -> None:
        """Waits for everything enqueued on the context's queue."""
        with self._handle.lock:
            check(lib.fcl_finish(self.ptr), self.ptr)

    def forward_path(self, dtype: DType, head_dim: int) -> str:
        """Which forward kernel runs for dtype at head_dim ("rows", "blocked", "nvidia-mma", ...)."""
        return lib.fcl_attention_forward_path(self.ptr, dtype_code(dtype), head_dim).decode()

    def empty(self, shape: Sequence[int], dtype: DType) -> "Tensor":
        """A new device tensor (contents undefined)."""
        out = ctypes.c_void_p()
        shape = [int(s) for s in shape]
        with self._handle.lock:
            check(lib.fcl_tensor_create(self.ptr, dtype_code(dtype), len(shape), _i64(shape), ctypes.byref(out)),
                  self.ptr)
        return Tensor(self, out.value, None)

    def tensor(self, array: Any, dtype: Optional[DType] = None) -> "Tensor":
        """A new device tensor holding a copy of a numpy array (converted to `dtype` on the host
        by numpy, default: the array's own, float64 as f32, int64 as i32)."""
        a = np.asarray(array)
        code = dtype_code(dtype) if dtype is not None else _numpy_code(a)
        t = self.empty(a.shape, code)
        t.write(a)
        return t

    def wrap_host(self, array: np.ndarray) -> "Tensor":
        """A tensor over a numpy array's own memory (fcl_tensor_wrap_host; CL_MEM_USE_HOST_PTR):
        in place where the device shares the host's memory and the array is aligned to
        host_alignment. The array must be f32/f16/i8/i32 (bf16 as uint16 is not told apart: use
        tensor()), its last axis contiguous, its strides non-negative. Host writes to the array
        are not seen by the tensor after this call; call Tensor.sync() before reading results.
        The tensor keeps the array alive."""
        if array.dtype not in _FROM_NUMPY or array.dtype in (np.float64, np.int64):
            raise ValueError(f"wrap_host takes float32, float16, int8 or int32 arrays, not {array.dtype}")
        code = _FROM_NUMPY[array.dtype]
        item = array.itemsize
        if array.ndim < 1 or array.ndim > 4:
            raise ValueError(f"tensors have 1 to 4 dims, not {array.ndim}")
        if not array.flags.aligned or any(s < 0 or s % item for s in array.strides) or \
                (array.shape[-1] > 1 and array.strides[-1] != item):
            raise ValueError("wrap_host needs an aligned array with a contiguous last axis and non-negative strides")
        strides = [s // item if n > 1 else 0 for s, n in zip(array.strides, array.shape)]
        strides[-1] = 1
        extent = (sum((n - 1) * s for n, s in zip(array.shape, strides)) + 1) * item
        out = ctypes.c_void_p()
        with self._handle.lock:
            check(lib.fcl_tensor_wrap_host(self.ptr, array.ctypes.data, extent, code, array.ndim,
                                           _i64(array.shape), _i64(strides), 0, ctypes.byref(out)), self.ptr)
        return Tensor(self, out.value, array, host=True)

    def wrap_cl(self, buffer: Any, dtype: DType, shape: Sequence[int], strides: Optional[Sequence[int]] = None,
                offset: int = 0, keep: Any = None) -> "Tensor":
        """A tensor over an OpenCL buffer of this context (a pyopencl Buffer or a raw cl_mem int),
        without a copy; strides and offset in elements (None: contiguous). The buffer is retained."""
        out = ctypes.c_void_p()
        mem = int(getattr(buffer, "int_ptr", buffer))
        shape = [int(s) for s in shape]
        with self._handle.lock:
            check(lib.fcl_tensor_wrap(self.ptr, mem, dtype_code(dtype), len(shape), _i64(shape),
                                      _i64(strides) if strides is not None else None, int(offset),
                                      ctypes.byref(out)), self.ptr)
        return Tensor(self, out.value, keep if keep is not None else buffer)

    def wrap_pyopencl(self, array: Any, dtype: Optional[DType] = None) -> "Tensor":
        """A tensor over a pyopencl.array.Array of this context, without a copy (dtype: the
        array's, or "bf16" for uint16 storage)."""
        item = array.dtype.itemsize
        code = dtype_code(dtype) if dtype is not None else _numpy_code(np.empty(0, array.dtype), exact=True)
        if array.offset % item or any(s < 0 or s % item for s in array.strides):
            raise ValueError("the pyopencl array's offset and strides must be non-negative multiples of its item size")
        strides = [s // item if n > 1 else 0 for s, n in zip(array.strides, array.shape)]
        strides[-1] = 1
        return self.wrap_cl(array.base_data, code, array.shape, strides, array.offset // item, keep=array)

    def __repr__(self) -> str:
        return f"flashcl.Context({self.device_name!r}, platform {self.platform_name!r})"


def _numpy_code(a: np.ndarray, exact: bool = False) -> int:
    if a.dtype == np.bool_:
        return F32
    if a.dtype not in _FROM_NUMPY or (exact and a.dtype in (np.float64, np.int64)):
        raise ValueError(f"no flashcl dtype for numpy {a.dtype} (float32, float16, int8, int32; bf16 by name)")
    return _FROM_NUMPY[a.dtype]


class Tensor:
    """A strided view over an OpenCL buffer (fcl_tensor). Made by Context.empty / tensor /
    wrap_host / wrap_cl / wrap_pyopencl or returned by the attention calls. Keeps its context
    (and any host or pyopencl array under it) alive."""

    def __init__(self, ctx: Context, ptr: int, keep: Any, host: bool = False) -> None:
        self.context = ctx
        self.ptr = ptr
        self._keep = keep
        self.host = host
        handle = ctx._handle.acquire()
        self._finalizer = weakref.finalize(self, _release_tensor, handle, ptr, host)
        self.dtype: str = DTYPE_NAMES[_tensor_dtype(ptr)]
        self.shape: Tuple[int, ...] = tuple(lib_dim(ptr, i) for i in range(lib_ndim(ptr)))
        self.strides: Tuple[int, ...] = tuple(lib_stride(ptr, i) for i in range(len(self.shape)))
        """Element strides."""

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape))

    def release(self) -> None:
        """Releases the tensor now (also done when it is garbage collected)."""
        self._finalizer()

    def write(self, array: Any) -> None:
        """Copies a host array of this tensor's shape into it (blocking; converted by numpy)."""
        a = np.asarray(array)
        if tuple(a.shape) != self.shape:
            raise ValueError(f"array shape {a.shape} != tensor shape {self.shape}")
        data = np.ascontiguousarray(to_storage(a, dtype_code(self.dtype)))
        h = self.context._handle
        with h.lock:
            check(lib.fcl_tensor_write_raw(self.ptr, data.ctypes.data, data.nbytes), h.ptr)

    def numpy(self) -> np.ndarray:
        """A host copy (blocking): float32 for f32 and bf16, float16 for f16, int8, int32."""
        code = dtype_code(self.dtype)
        out = np.empty(self.shape, STORAGE[code])
        h = self.context._handle
        with h.lock:
            check(lib.fcl_tensor_read_raw(self.ptr, out.ctypes.data, out.nbytes), h.ptr)
        return from_bf16_bits(out) if code == BF16 else out

    def sync(self) -> None:
        """For a tensor over host memory (wrap_host): makes the array hold what ops wrote."""
        h = self.context._handle
        with h.lock:
            check(lib.fcl_tensor_sync_host(self.ptr), h.ptr)

    def view(self, shape: Sequence[int], strides: Optional[Sequence[int]] = None, offset: int = 0) -> "Tensor":
        """A view of the same buffer (strides and offset in elements, offset from this view's)."""
        out = ctypes.c_void_p()
        shape = [int(s) for s in shape]
        h = self.context._handle
        with h.lock:
            check(lib.fcl_tensor_view(self.ptr, len(shape), _i64(shape), _i64(strides) if strides is not None else None,
                                      int(offset), ctypes.byref(out)), h.ptr)
        return Tensor(self.context, out.value, self, host=self.host)

    def __repr__(self) -> str:
        return f"flashcl.Tensor(shape={self.shape}, dtype={self.dtype!r}, strides={self.strides})"


def _tensor_dtype(ptr: int) -> int:
    return lib.fcl_tensor_dtype(ptr)


def lib_ndim(ptr: int) -> int:
    return lib.fcl_tensor_ndim(ptr)


def lib_dim(ptr: int, i: int) -> int:
    return lib.fcl_tensor_dim(ptr, i)


def lib_stride(ptr: int, i: int) -> int:
    return lib.fcl_tensor_stride(ptr, i)


# ---------------------------------------------------------------- arguments of the calls

_default_lock = threading.Lock()
_default: Optional[Context] = None
# one context (with its compiled kernels) per pyopencl queue used, kept for the process
_pyopencl_contexts: "dict[int, Context]" = {}


def default_context() -> Context:
    """The context numpy calls use when given none: Context() (FLASHCL_DEVICE or the default
    device), made at the first call."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Context()
        return _default


def _is_pyopencl(x: Any) -> bool:
    return hasattr(x, "base_data") and hasattr(x, "queue") and hasattr(x, "context")


def context_for(args: Sequence[Any], given: Optional[Context]) -> Context:
    """The context of a call: `given`, else the one of a Tensor argument, else one over the
    queue of a pyopencl argument (made at its first use, then kept), else the default context."""
    if given is not None:
        return given
    for a in args:
        if isinstance(a, Tensor):
            return a.context
    for a in args:
        if _is_pyopencl(a):
            key = int(a.queue.int_ptr)
            with _default_lock:
                ctx = _pyopencl_contexts.get(key)
                if ctx is None:
                    ctx = Context.from_cl(a.context, a.queue.device, a.queue)
                    ctx._pyopencl_queue = a.queue  # the handle stays valid: the key is never reused
                    _pyopencl_contexts[key] = ctx
            return ctx
    return default_context()


class Call:
    """The tensors of one call: inputs bound from numpy (in place or copied), pyopencl arrays
    (wrapped) or Tensors (as they are); outputs allocated like the inputs; after the op,
    finish() makes numpy outputs hold the results. Tensors made here are released at the end."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.made: List[Tensor] = []
        self.after: List[Callable[[], None]] = []

    def __enter__(self) -> "Call":
        return self

    def __exit__(self, *exc: Any) -> None:
        for t in self.made:
            t.release()

    def _keep(self, t: Tensor) -> Tensor:
        self.made.append(t)
        return t

    def input(self, x: Any, code: Optional[int] = None, name: str = "argument") -> Tensor:
        """x as a tensor of fcl_dtype `code` (None: x's own)."""
        if isinstance(x, Tensor):
            if x.context is not self.ctx:
                raise ValueError(f"{name} belongs to another flashcl context")
            return x
        if _is_pyopencl(x):
            return self._keep(self.ctx.wrap_pyopencl(x, code))
        a = np.asarray(x)
        code = _numpy_code(a) if code is None else code
        if a.ndim < 1 or a.ndim > 4:
            raise ValueError(f"{name} has {a.ndim} dims; tensors have 1 to 4")
        if self.ctx.in_place and code != BF16:
            s = to_storage(a, code)
            strided_last = s.shape[-1] > 1 and s.strides[-1] != s.itemsize
            if strided_last or not s.flags.aligned or any(st < 0 or st % s.itemsize for st in s.strides):
                s = np.ascontiguousarray(s)
            return self._keep(self.ctx.wrap_host(s))
        return self._keep(self.ctx.tensor(a, code))

    def output(self, like: Any, shape: Sequence[int], code: int) -> Tuple[Tensor, Any]:
        """A new output of `shape` and fcl_dtype `code`, of the same kind as `like` (numpy,
        pyopencl or Tensor): (tensor, what to return to the caller)."""
        if isinstance(like, Tensor):
            t = self.ctx.empty(shape, code)
            return t, t
        if _is_pyopencl(like):
            import pyopencl.array as cla
            arr = cla.empty(like.queue, tuple(shape), STORAGE[code])
            return self._keep(self.ctx.wrap_pyopencl(arr, code)), arr
        return self.host_output(shape, code)

    def host_output(self, shape: Sequence[int], code: int) -> Tuple[Tensor, np.ndarray]:
        storage = STORAGE[code]
        if self.ctx.in_place and code != BF16:
            arr = aligned_empty(shape, storage, max(self.ctx.host_alignment, 64))
            t = self._keep(self.ctx.wrap_host(arr))
            self.after.append(t.sync)
            return t, arr
        t = self._keep(self.ctx.empty(shape, code))
        arr = np.empty(tuple(shape), storage)

        def read() -> None:
            arr[...] = t.numpy() if code != BF16 else to_bf16_bits(t.numpy())
        self.after.append(read)
        return t, arr

    def inout(self, x: Any, name: str) -> Tensor:
        """An argument the op updates in place (a KV cache): numpy arrays get the result back."""
        if isinstance(x, Tensor) or _is_pyopencl(x):
            return self.input(x, None, name)
        if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float16):
            raise ValueError(f"{name} must be a float32 or float16 numpy array, a pyopencl array or a flashcl Tensor")
        if self.ctx.in_place and x.flags.c_contiguous:
            t = self._keep(self.ctx.wrap_host(x))
            self.after.append(t.sync)
            return t
        t = self._keep(self.ctx.tensor(x))

        def read() -> None:
            x[...] = t.numpy()
        self.after.append(read)
        return t

    def finish(self) -> None:
        """Waits for the op and fills the numpy outputs."""
        self.ctx.finish()
        for fn in self.after:
            fn()


def aligned_empty(shape: Sequence[int], dtype: np.dtype, align: int) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts at a multiple of `align` bytes."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = np.empty(n + align, np.uint8)
    start = (-buf.ctypes.data) % align
    return buf[start:start + n].view(dtype).reshape(tuple(shape))


def shape_of(x: Any) -> Tuple[int, ...]:
    return tuple(int(s) for s in (x.shape if hasattr(x, "shape") else np.asarray(x).shape))


def code_of(x: Any) -> int:
    """The fcl_dtype an attention input has (Tensor: its own; arrays: float32/float16)."""
    if isinstance(x, Tensor):
        return dtype_code(x.dtype)
    dt = np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype
    if dt == np.float32:
        return F32
    if dt == np.float16:
        return F16
    raise ValueError(f"attention inputs are float32 or float16 arrays (or flashcl Tensors of f32/f16/bf16), not {dt}")


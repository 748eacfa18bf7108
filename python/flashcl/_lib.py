# SPDX-License-Identifier: Apache-2.0
"""The C library through ctypes: loading, the signatures of the calls the package uses, the
public structs (checked against the library's own layout at import), and errors."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path
from typing import Iterator, Optional

try:
    from . import _build  # written by setup.py
except ImportError:  # a source checkout on sys.path
    _build = None

c_void_p = ctypes.c_void_p
c_int = ctypes.c_int
c_int64 = ctypes.c_int64
c_size_t = ctypes.c_size_t
c_char_p = ctypes.c_char_p
c_float = ctypes.c_float
P = ctypes.POINTER

# fcl_status values and names
STATUS_NAMES = {
    0: "FCL_SUCCESS", -1: "FCL_ERR_INVALID_ARGUMENT", -2: "FCL_ERR_SHAPE", -3: "FCL_ERR_DTYPE",
    -4: "FCL_ERR_LAYOUT", -5: "FCL_ERR_UNSUPPORTED", -6: "FCL_ERR_NO_DEVICE", -7: "FCL_ERR_OPENCL",
    -8: "FCL_ERR_BUILD", -9: "FCL_ERR_OUT_OF_MEMORY",
}


class FlashCLError(RuntimeError):
    """A flashcl call failed. `status` is the fcl_status name (e.g. "FCL_ERR_SHAPE"), `code` its
    value, and the message is fcl_last_error's sentence saying what was wrong."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.status = STATUS_NAMES.get(code, f"fcl_status {code}")
        self.message = message
        super().__init__(f"{self.status}: {message}")


class AttnParams(ctypes.Structure):
    """fcl_attn_params."""
    _fields_ = [("scale", c_float), ("causal", c_int), ("window_left", c_int), ("window_right", c_int),
                ("softcap", c_float), ("key_mask", c_void_p), ("alibi_slopes", c_void_p)]


class DeviceInfo(ctypes.Structure):
    """fcl_device_info."""
    _fields_ = [("name", ctypes.c_char * 256), ("vendor", ctypes.c_char * 256),
                ("driver_version", ctypes.c_char * 128), ("device_version", ctypes.c_char * 128),
                ("platform_name", ctypes.c_char * 256), ("platform_version", ctypes.c_char * 256),
                ("type", c_int), ("compute_units", ctypes.c_uint), ("global_mem_bytes", ctypes.c_uint64),
                ("max_alloc_bytes", ctypes.c_uint64), ("local_mem_bytes", ctypes.c_uint64),
                ("max_work_group_size", c_size_t), ("has_fp16", c_int), ("has_fp64", c_int),
                ("has_subgroups", c_int), ("nv_cc_major", c_int), ("nv_cc_minor", c_int)]


class CacheStats(ctypes.Structure):
    """fcl_cache_stats."""
    _fields_ = [("compiles", ctypes.c_uint64), ("memory_hits", ctypes.c_uint64), ("disk_hits", ctypes.c_uint64),
                ("disk_writes", ctypes.c_uint64), ("disk_rejects", ctypes.c_uint64)]


class KVCache(ctypes.Structure):
    """fcl_kv_cache."""
    _fields_ = [("k", c_void_p), ("v", c_void_p), ("block_table", c_void_p)]


class Weight(ctypes.Structure):
    """fcl_weight."""
    _fields_ = [("w", c_void_p), ("scale", c_void_p), ("bias", c_void_p)]


class WeightGrad(ctypes.Structure):
    """fcl_weight_grad."""
    _fields_ = [("dw", c_void_p), ("db", c_void_p)]


STRUCTS = {"fcl_attn_params": AttnParams, "fcl_device_info": DeviceInfo, "fcl_cache_stats": CacheStats,
           "fcl_kv_cache": KVCache, "fcl_weight": Weight, "fcl_weight_grad": WeightGrad}

_t = c_void_p  # fcl_tensor, fcl_context, cl_* handles: opaque pointers
_SIGNATURES = {
    "fcl_version_string": (c_char_p, []),
    "fcl_version_number": (ctypes.c_uint, []),
    "fcl_status_string": (c_char_p, [c_int]),
    "fcl_struct_layout": (c_size_t, [c_char_p, c_char_p]),
    "fcl_context_create": (c_int, [c_char_p, P(_t)]),
    "fcl_context_create_from_cl": (c_int, [_t, _t, _t, P(_t)]),
    "fcl_context_release": (None, [_t]),
    "fcl_finish": (c_int, [_t]),
    "fcl_last_error": (c_char_p, [_t]),
    "fcl_context_device_info": (c_int, [_t, P(DeviceInfo)]),
    "fcl_context_cl_context": (_t, [_t]),
    "fcl_context_cl_device": (_t, [_t]),
    "fcl_context_cl_queue": (_t, [_t]),
    "fcl_host_alignment": (c_size_t, [_t]),
    "fcl_tensor_create": (c_int, [_t, c_int, c_int, P(c_int64), P(_t)]),
    "fcl_tensor_wrap": (c_int, [_t, _t, c_int, c_int, P(c_int64), P(c_int64), c_int64, P(_t)]),
    "fcl_tensor_wrap_host": (c_int, [_t, _t, c_size_t, c_int, c_int, P(c_int64), P(c_int64), c_int64, P(_t)]),
    "fcl_tensor_sync_host": (c_int, [_t]),
    "fcl_tensor_view": (c_int, [_t, c_int, P(c_int64), P(c_int64), c_int64, P(_t)]),
    "fcl_tensor_release": (None, [_t]),
    "fcl_tensor_dtype": (c_int, [_t]),
    "fcl_tensor_ndim": (c_int, [_t]),
    "fcl_tensor_dim": (c_int64, [_t, c_int]),
    "fcl_tensor_stride": (c_int64, [_t, c_int]),
    "fcl_tensor_write_raw": (c_int, [_t, _t, c_size_t]),
    "fcl_tensor_read_raw": (c_int, [_t, _t, c_size_t]),
    "fcl_attention_forward": (c_int, [_t, P(AttnParams), _t, _t, _t, _t, _t, _t]),
    "fcl_attention_varlen_forward": (c_int, [_t, P(AttnParams), _t, _t, _t, _t, _t, c_int, c_int, _t, _t, _t]),
    "fcl_varlen_validate": (c_int, [_t, _t, _t, c_int64, c_int64, c_int, c_int]),
    "fcl_attention_backward": (c_int, [_t, P(AttnParams), _t, _t, _t, _t, _t, _t, _t, _t, _t, _t]),
    "fcl_attention_varlen_backward": (c_int, [_t, P(AttnParams), _t, _t, _t, _t, _t, _t, _t, _t, c_int, c_int,
                                             _t, _t, _t, _t]),
    "fcl_attention_packed_qkv_forward": (c_int, [_t, P(AttnParams), _t, _t, _t, _t, _t]),
    "fcl_attention_packed_qkv_backward": (c_int, [_t, P(AttnParams), _t, _t, _t, _t, _t, _t, _t]),
    "fcl_kv_cache_append": (c_int, [_t, P(KVCache), _t, _t, c_int64, _t, _t]),
    "fcl_attention_decode": (c_int, [_t, P(AttnParams), _t, P(KVCache), c_int64, _t, _t, _t, _t, _t]),
    "fcl_attention_forward_path": (c_char_p, [_t, c_int, c_int64]),
}


def _candidates() -> Iterator[str]:
    """Where the library may be, in order: FLASHCL_LIBRARY, the copy bundled by setup.py, the
    installed one setup.py recorded (FLASHCL_PREFIX at build time), then the loader's search."""
    env = os.environ.get("FLASHCL_LIBRARY")
    if env:
        yield env
        return
    bundled = Path(__file__).with_name("_native") / "libflashcl.so"
    if bundled.exists():
        yield str(bundled)
    if _build is not None and _build.LIBRARY:
        yield _build.LIBRARY
    yield "libflashcl.so"
    found = ctypes.util.find_library("flashcl")
    if found:
        yield found


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("flashcl: cannot load the C library (pip install ./python builds it; or set "
                      "FLASHCL_LIBRARY to libflashcl.so): " + "; ".join(errors))


def _declare(lib: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError(f"flashcl: the C library has no {name} (an older library?)") from None
        fn.restype = restype
        fn.argtypes = argtypes


def check_layouts(lib: ctypes.CDLL) -> None:
    """Raises ImportError unless every struct above has the library's size and field offsets."""
    for cname, cls in STRUCTS.items():
        want = lib.fcl_struct_layout(cname.encode(), None)
        if want != ctypes.sizeof(cls):
            raise ImportError(f"flashcl: sizeof({cname}) is {want} in the library, {ctypes.sizeof(cls)} here")
        for field, _ in cls._fields_:
            off = lib.fcl_struct_layout(cname.encode(), field.encode())
            if off != getattr(cls, field).offset:
                raise ImportError(f"flashcl: offsetof({cname}, {field}) is {off} in the library, "
                                  f"{getattr(cls, field).offset} here")


def _version_tuple(text: str) -> tuple:
    return tuple(int(x) for x in text.split("."))


lib = _load()
_declare(lib)
check_layouts(lib)
LIBRARY_VERSION: str = lib.fcl_version_string().decode()
PACKAGE_VERSION: Optional[str] = _build.VERSION if _build is not None else None
if PACKAGE_VERSION is not None and _version_tuple(PACKAGE_VERSION)[:2] != _version_tuple(LIBRARY_VERSION)[:2]:
    raise ImportError(f"flashcl: the package is {PACKAGE_VERSION} but the C library loaded is {LIBRARY_VERSION}")


def check(status: int, ctx: Optional[int]) -> None:
    """Raises FlashCLError with fcl_last_error(ctx)'s sentence when status is not FCL_SUCCESS."""
    if status != 0:
        msg = lib.fcl_last_error(ctx)
        raise FlashCLError(status, msg.decode(errors="replace") if msg else "")

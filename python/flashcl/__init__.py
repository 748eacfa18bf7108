# SPDX-License-Identifier: Apache-2.0
"""flashcl: flash-attention kernels in OpenCL C for every OpenCL 1.2 device, from Python.

    import numpy as np, flashcl
    out = flashcl.flash_attn_func(q, k, v, causal=True)   # numpy in, numpy out

The C library is loaded through ctypes (FLASHCL_LIBRARY overrides where from); its struct
layouts and version are checked at import. The device comes from FLASHCL_DEVICE (or pass
context=flashcl.Context("pocl")). See flashcl.attention and flashcl.packed (fused QKV and KV) for the
calls' semantics.
"""
from ._lib import LIBRARY_VERSION as __version__
from ._lib import FlashCLError
from ._core import Context, Tensor, default_context
from .attention import (flash_attn_backward, flash_attn_func, flash_attn_varlen_backward,
                        flash_attn_varlen_func, flash_attn_with_kvcache, mask_to_keep)
from .packed import (flash_attn_kvpacked_backward, flash_attn_kvpacked_func, flash_attn_qkvpacked_backward,
                     flash_attn_qkvpacked_func, flash_attn_varlen_kvpacked_backward, flash_attn_varlen_kvpacked_func,
                     flash_attn_varlen_qkvpacked_backward, flash_attn_varlen_qkvpacked_func)

__all__ = [
    "Context", "Tensor", "FlashCLError", "default_context", "flash_attn_func", "flash_attn_varlen_func",
    "flash_attn_with_kvcache", "flash_attn_backward", "flash_attn_varlen_backward", "flash_attn_qkvpacked_func",
    "flash_attn_varlen_qkvpacked_func", "flash_attn_qkvpacked_backward", "flash_attn_varlen_qkvpacked_backward",
    "flash_attn_kvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_kvpacked_backward",
    "flash_attn_varlen_kvpacked_backward",
    "mask_to_keep", "__version__",
]

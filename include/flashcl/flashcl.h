/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flashcl — flash-attention kernels in OpenCL C for every OpenCL 1.2 device.
 *
 * This is the one header users include. Conventions that hold for every call:
 *
 *  - Every call returns fcl_status (0 = success, negative = error) unless it is a getter.
 *    A call its checks reject (any bad input, and scratch beyond the device's largest
 *    allocation) has enqueued nothing and written no output, and fcl_last_error(ctx) holds a
 *    sentence naming the argument and values that were wrong. A failure the OpenCL
 *    implementation reports while an op enqueues its commands (FCL_ERR_OPENCL, FCL_ERR_BUILD
 *    of a later kernel, FCL_ERR_OUT_OF_MEMORY) may come after some of them were enqueued; the
 *    op's outputs are then unspecified. No call aborts, prints or exits.
 *  - An output must address each of its elements once (no stride 0 over a dim of more than
 *    one element, no overlapping dims: FCL_ERR_LAYOUT) and share no element with another
 *    output or any input, side inputs included (FCL_ERR_INVALID_ARGUMENT).
 *  - Handles (fcl_context, fcl_tensor) are opaque; each *_create has a *_release that
 *    accepts NULL.
 *  - Threading: any call may come from any thread. A context serialises the calls on it and
 *    on its tensors with a lock: an op's checks, kernel builds (seconds at first use on some
 *    CPU implementations) and enqueues, and the blocking tensor copies run one at a time per
 *    context (uncontended, a lock and unlock per call: about 45 ns on the 2-core CI machine);
 *    fcl_finish waits without holding it. The device runs one in-order queue per context
 *    either way: threads that want their host work and device work to proceed independently
 *    use a context each. fcl_last_error(ctx) is per thread. A release must not race with
 *    other calls on the object it releases. Different contexts are independent, but loading
 *    cached program binaries and releasing programs are serialised per device (PoCL 3.1, its
 *    kernel cache off, aborted when several contexts did either at once).
 *  - Ops enqueue on the context's in-order queue and return without waiting; fcl_finish()
 *    waits. When `event` is not NULL it receives a new cl_event of the op's last command,
 *    owned by the caller (clReleaseEvent).
 */
#ifndef FLASHCL_H
#define FLASHCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; what this header declares is its exported API. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- version */

#define FCL_VERSION_MAJOR 0
#define FCL_VERSION_MINOR 48
#define FCL_VERSION_PATCH 0
#define FCL_VERSION_NUMBER (FCL_VERSION_MAJOR * 10000 + FCL_VERSION_MINOR * 100 + FCL_VERSION_PATCH)
#define FCL_VERSION_STRING "0.48.0"

/* The library's version as "MAJOR.MINOR.PATCH" (static string; thread-safe). */
const char *fcl_version_string(void);
/* The library's version as MAJOR*10000 + MINOR*100 + PATCH (thread-safe). */
unsigned fcl_version_number(void);

/* ---------------------------------------------------------------- status */

typedef enum fcl_status {
    FCL_SUCCESS = 0,
    FCL_ERR_INVALID_ARGUMENT = -1, /* NULL where a value is required, or a bad value */
    FCL_ERR_SHAPE = -2,            /* shapes or ranks that do not agree */
    FCL_ERR_DTYPE = -3,            /* a dtype the call does not take, or mixed dtypes */
    FCL_ERR_LAYOUT = -4,           /* strides/offset: non-contiguous last dim, view past the buffer */
    FCL_ERR_UNSUPPORTED = -5,      /* valid but beyond what this build supports (e.g. D > 256) */
    FCL_ERR_NO_DEVICE = -6,        /* no OpenCL device matches the selector */
    FCL_ERR_OPENCL = -7,           /* an OpenCL call failed (the message names it and its code) */
    FCL_ERR_BUILD = -8,            /* a kernel failed to compile (the message holds the log's start) */
    FCL_ERR_OUT_OF_MEMORY = -9     /* host or device allocation failed */
} fcl_status;

/* The status's name, e.g. "FCL_ERR_SHAPE" (static string; thread-safe). */
const char *fcl_status_string(fcl_status status);

/* ---------------------------------------------------------------- context */

/* A device, its in-order queue, its capabilities, the program cache and a scratch pool. */
typedef struct fcl_context_s *fcl_context;

/*
 * Creates a context on the device chosen by `selector`; when `selector` is NULL or "",
 * the FLASHCL_DEVICE environment variable is used, and when that is unset too, the first
 * GPU, else the first CPU, of all platforms. Selector forms:
 *   "gpu" / "cpu"   first device of that type;
 *   "P:D"           device D of platform P (indices as flashcl-info lists them);
 *   any other word  first device of the first platform whose name or vendor contains it,
 *                   case-insensitively ("pocl", "nvidia", "rusticl", "intel"); when no platform
 *                   does, the first device whose vendor or name contains it ("llvmpipe").
 * Platforms that list no devices are skipped. On success *out owns the new context.
 * On failure *out is NULL and fcl_last_error(NULL) says why (thread-local).
 */
fcl_status fcl_context_create(const char *selector, fcl_context *out);

/*
 * Wraps the caller's OpenCL objects. `cl_ctx` and `device` are required; `queue` may be
 * NULL (a new in-order queue is created) or an in-order queue of `cl_ctx` on `device`, which
 * must be one of cl_ctx's devices (else FCL_ERR_INVALID_ARGUMENT). All three are retained and
 * released by fcl_context_release.
 */
fcl_status fcl_context_create_from_cl(cl_context cl_ctx, cl_device_id device, cl_command_queue queue,
                                      fcl_context *out);

/* Releases the context, its queue (after finishing it), programs and scratch. NULL is a no-op.
 * Tensors made from the context must be released first, and no other thread may be using it. */
void fcl_context_release(fcl_context ctx);

/* Waits for everything enqueued on the context's queue. */
fcl_status fcl_finish(fcl_context ctx);

/*
 * The last error message of a call on `ctx` made by the calling thread ("" when none), valid
 * until that thread's next call on ctx; a thread keeps the messages of its 8 most recently
 * failing contexts. With ctx == NULL: the thread's last message of a call that had no context
 * to hold it (a failed fcl_context_create, a NULL context argument).
 */
const char *fcl_last_error(fcl_context ctx);

typedef enum fcl_device_type { FCL_DEVICE_OTHER = 0, FCL_DEVICE_CPU = 1, FCL_DEVICE_GPU = 2,
                               FCL_DEVICE_ACCELERATOR = 3 } fcl_device_type;

/* "cpu", "gpu", "accelerator" or "other" (static string; thread-safe). */
const char *fcl_device_type_name(fcl_device_type type);

/* What the context knows of its device (filled by fcl_context_device_info). */
typedef struct fcl_device_info {
    char name[256];
    char vendor[256];
    char driver_version[128];
    char device_version[128];   /* CL_DEVICE_VERSION */
    char platform_name[256];
    char platform_version[256];
    fcl_device_type type;
    unsigned compute_units;
    uint64_t global_mem_bytes;
    uint64_t max_alloc_bytes;
    uint64_t local_mem_bytes;
    size_t max_work_group_size;
    int has_fp16;               /* cl_khr_fp16 */
    int has_fp64;               /* cl_khr_fp64 */
    int has_subgroups;          /* cl_khr_subgroups or cl_intel_subgroups */
    int nv_cc_major, nv_cc_minor; /* NVIDIA compute capability; 0 when not an NVIDIA device */
} fcl_device_info;

/* Copies the device's capabilities into *out. */
fcl_status fcl_context_device_info(fcl_context ctx, fcl_device_info *out);

/* The underlying OpenCL objects (not retained for the caller; valid while ctx lives). */
cl_context fcl_context_cl_context(fcl_context ctx);
cl_device_id fcl_context_cl_device(fcl_context ctx);
cl_command_queue fcl_context_cl_queue(fcl_context ctx);

/* ---------------------------------------------------------------- program cache */

/* Counters of the context's program cache since it was created. */
typedef struct fcl_cache_stats {
    uint64_t compiles;      /* programs built from source */
    uint64_t memory_hits;   /* kernels found already built in this context */
    uint64_t disk_hits;     /* programs loaded from a cached binary on disk */
    uint64_t disk_writes;   /* binaries written to the disk cache */
    uint64_t disk_rejects;  /* cache files found bad (truncated, corrupt, foreign) and replaced */
} fcl_cache_stats;

/* Copies the counters into *out. */
fcl_status fcl_context_cache_stats(fcl_context ctx, fcl_cache_stats *out);

/*
 * The disk cache folder this context uses, or NULL when the disk cache is off
 * (FLASHCL_CACHE_DIR=off, or the folder could not be created or written). The folder is
 * FLASHCL_CACHE_DIR, else $XDG_CACHE_HOME/flashcl, else $HOME/.cache/flashcl; it is read
 * once, at context creation. Compiled programs go there except on PoCL while its own kernel
 * cache is on (then disk_hits and disk_writes stay 0); FLASHCL_CACHE_PROGRAMS=1 or 0 stores
 * them on every device or none. Tuned tiles go there on every device.
 */
const char *fcl_context_cache_dir(fcl_context ctx);

/* ---------------------------------------------------------------- tensors */

typedef enum fcl_dtype { FCL_F32 = 0, FCL_F16 = 1, FCL_BF16 = 2, FCL_I8 = 3, FCL_I32 = 4 } fcl_dtype;

/* Bytes per element (0 for an unknown dtype). */
size_t fcl_dtype_size(fcl_dtype dtype);
/* "f32", "f16", "bf16", "i8", "i32" ("?" for an unknown dtype). */
const char *fcl_dtype_name(fcl_dtype dtype);

#define FCL_MAX_DIMS 4

/* A strided view of up to 4 dims over a cl_mem. The last dim must have stride 1. */
typedef struct fcl_tensor_s *fcl_tensor;

/* Creates a tensor owning a new contiguous (row-major) buffer of `ndim` dims (1..4), every
 * dim >= 1 (else FCL_ERR_SHAPE). The contents are undefined. */
fcl_status fcl_tensor_create(fcl_context ctx, fcl_dtype dtype, int ndim, const int64_t *shape,
                             fcl_tensor *out);

/*
 * Wraps the caller's buffer (retained until the tensor is released). `strides` are in
 * elements (NULL = contiguous row-major) and `offset` is in elements from the buffer start.
 * Every element the view can address must lie inside the buffer.
 */
fcl_status fcl_tensor_wrap(fcl_context ctx, cl_mem buffer, fcl_dtype dtype, int ndim,
                           const int64_t *shape, const int64_t *strides, int64_t offset,
                           fcl_tensor *out);

/*
 * A view of `base`'s buffer with its own shape and strides (NULL = contiguous), starting
 * `offset` elements after base's own offset; same dtype. The view keeps the buffer alive;
 * base may be released first. Every addressable element must lie inside the buffer.
 */
fcl_status fcl_tensor_view(fcl_tensor base, int ndim, const int64_t *shape, const int64_t *strides,
                           int64_t offset, fcl_tensor *out);

/* Releases the tensor (and its buffer reference). NULL is a no-op. */
void fcl_tensor_release(fcl_tensor t);

/*
 * Wraps `bytes` of the caller's host memory at `host` as a new buffer created with
 * CL_MEM_USE_HOST_PTR, viewed as fcl_tensor_wrap views a cl_mem (strides NULL = contiguous,
 * offset in elements). `host` must be aligned to the dtype's size (else FCL_ERR_LAYOUT). Where
 * the device shares the host's memory and `host` is aligned to fcl_host_alignment(ctx) (CPU
 * devices such as PoCL and Intel's CPU runtime), OpenCL implementations use the memory in place;
 * elsewhere they keep a device copy made at creation. Either way:
 *  - the memory's contents at this call are the tensor's initial contents;
 *  - after ops wrote the tensor, fcl_tensor_sync_host makes the host memory current;
 *  - the memory must stay valid, and must not be written by the host, until the tensor and
 *    every view of it are released and the commands using them have finished (fcl_finish).
 * To pass new host values, wrap again.
 */
fcl_status fcl_tensor_wrap_host(fcl_context ctx, void *host, size_t bytes, fcl_dtype dtype, int ndim,
                                const int64_t *shape, const int64_t *strides, int64_t offset,
                                fcl_tensor *out);

/*
 * Makes the host memory under a tensor made by fcl_tensor_wrap_host (or a view of one) hold
 * what the ops enqueued so far wrote: waits for the queue, then maps the buffer for reading and
 * unmaps it (blocking; no copy where the memory is used in place). FCL_ERR_INVALID_ARGUMENT for
 * a tensor whose buffer was not created over host memory.
 */
fcl_status fcl_tensor_sync_host(fcl_tensor t);

/*
 * The alignment in bytes at which fcl_tensor_wrap_host can use host memory in place on ctx's
 * device: the device's base address alignment (CL_DEVICE_MEM_BASE_ADDR_ALIGN, in bytes) when
 * it shares the host's memory (CL_DEVICE_HOST_UNIFIED_MEMORY), else 0 (host memory is copied).
 * 0 for a NULL ctx.
 */
size_t fcl_host_alignment(fcl_context ctx);

/* Getters (no status; they return 0 / NULL for a NULL tensor or an out-of-range dim). */
fcl_dtype fcl_tensor_dtype(fcl_tensor t);
int fcl_tensor_ndim(fcl_tensor t);
int64_t fcl_tensor_dim(fcl_tensor t, int i);
int64_t fcl_tensor_stride(fcl_tensor t, int i);
int64_t fcl_tensor_offset(fcl_tensor t);
int64_t fcl_tensor_numel(fcl_tensor t);
cl_mem fcl_tensor_buffer(fcl_tensor t); /* not retained for the caller */

/*
 * Blocking host copies of the whole logical tensor, elements in row-major order of its
 * shape (strided views are gathered/scattered; elements outside the view are untouched).
 * _f32: `count` must equal numel; float32 is converted to/from the tensor's dtype
 * (F16, BF16, I8 and I32 round to nearest even; I8/I32 saturate, NaN becomes 0).
 * _raw: `bytes` must equal numel * dtype size; elements are copied as stored.
 * These wait for work already enqueued on the context's queue.
 */
fcl_status fcl_tensor_write_f32(fcl_tensor t, const float *src, size_t count);
fcl_status fcl_tensor_read_f32(fcl_tensor t, float *dst, size_t count);
fcl_status fcl_tensor_write_raw(fcl_tensor t, const void *src, size_t bytes);
fcl_status fcl_tensor_read_raw(fcl_tensor t, void *dst, size_t bytes);

/* Host conversions used by the tensor copies, exposed for callers and tests. */
uint16_t fcl_f32_to_f16(float x);   /* round to nearest even; overflow -> inf; NaN stays NaN */
float fcl_f16_to_f32(uint16_t h);
uint16_t fcl_f32_to_bf16(float x);  /* round to nearest even; NaN stays NaN */
float fcl_bf16_to_f32(uint16_t b);

/* ---------------------------------------------------------------- attention semantics */

/*
 * Attention semantics shared by every op. Start from FCL_ATTN_PARAMS_INIT (or
 * fcl_attn_params_default()) and set what differs.
 *  scale          multiplies QK^T; 0 means 1/sqrt(D).
 *  causal         bottom-right aligned: query i (absolute position i + Sk - Sq) sees keys
 *                 j <= i + Sk - Sq; it forces window_right = 0.
 *  window_left,   query i sees key j iff p - window_left <= j <= p + window_right with
 *  window_right   p = i + Sk - Sq; -1 = unbounded on that side; values < -1 are rejected.
 *  softcap        when > 0, s = softcap * tanh(s / softcap) after scaling; 0 = off.
 *  key_mask       optional F32 [B, Sk] (or [Sk], shared by all batches): a key is attended
 *                 iff its value > 0.5; combines with the window.
 *  alibi_slopes   optional F32 [Hq] or [B, Hq]: adds -slope * |p - j| after soft-capping.
 * A query row that sees no key writes O = 0 and LSE = -inf. The params struct and the
 * tensors it names are only read during the call.
 */
typedef struct fcl_attn_params {
    float scale;
    int causal;
    int window_left;
    int window_right;
    float softcap;
    fcl_tensor key_mask;
    fcl_tensor alibi_slopes;
} fcl_attn_params;

#define FCL_ATTN_PARAMS_INIT { 0.0f, 0, -1, -1, 0.0f, NULL, NULL }

/* FCL_ATTN_PARAMS_INIT as a value. */
fcl_attn_params fcl_attn_params_default(void);

/* Largest head dim the attention kernels take. */
#define FCL_MAX_HEAD_DIM 256

/*
 * Attention forward: O = softmax(mask(alibi(softcap(scale * Q K^T)))) V, per (batch, head).
 *  Q    [B, Sq, Hq, D]           F32, F16 or BF16
 *  K, V [B, Sk, Hkv, D]          same dtype as Q; Hq % Hkv == 0 (GQA/MQA: query head h
 *                                reads KV head h / (Hq / Hkv)); 1 <= D <= FCL_MAX_HEAD_DIM
 *  O    [B, Sq, Hq, D]           same dtype; overwritten
 *  LSE  [B, Hq, Sq] F32 or NULL  overwritten with the natural-log sum of exp of the scores
 * Dims are logical: any element strides are accepted as long as the last dim (D) is
 * contiguous, so [B,H,S,D] storage is passed as a view with permuted strides. O must not
 * overlap Q, K, V or LSE. Enqueues one kernel (several on devices that cap loop iterations,
 * e.g. Mesa llvmpipe; the result is the same); `event` as described at the top.
 */
fcl_status fcl_attention_forward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q,
                                 fcl_tensor K, fcl_tensor V, fcl_tensor O, fcl_tensor LSE,
                                 cl_event *event);

/*
 * Which forward kernel runs for `dtype` at head dim `head_dim` on ctx's device (dense, varlen
 * and packed forwards alike, and the attention inside the qkvo forwards):
 *   "nvidia-wgmma" Hopper's warpgroup tensor cores through inline PTX wgmma (NVIDIA compute
 *                 capability 9.0, F16 or BF16, head_dim 33..128, 65..96 on the D 128 kernel
 *                 with zeros past head_dim; the program's PTX promoted to sm_90a); a call with
 *                 a key mask at head_dim > 64 takes
 *                 "nvidia-mma" (the mask values do not fit beside the tiles), and so does every
 *                 call once the driver has refused a promotion on this context;
 *   "nvidia-mma"  tensor cores through inline PTX mma.sync (NVIDIA compute capability >= 8.0,
 *                 F16 or BF16);
 *   "blocked"     the register-blocked portable kernel (GPUs without a loop cap: every dtype
 *                 where "nvidia-mma" does not apply; and Intel's OpenCL CPU runtime); on
 *                 devices with subgroups of a size flashcl can fix (see
 *                 fcl_attention_decode_path) the work-items of a row block meet by subgroup
 *                 shuffles instead of local memory;
 *   "cpu"         the CPUs' portable kernel: one work-item owns 2 native float vectors of
 *                 query rows and works in vertical SIMD across them (CPUs without a loop cap:
 *                 PoCL, Intel's OpenCL CPU runtime);
 *   "rows"        the row-per-work-item portable kernel (devices that cap loop iterations such
 *                 as Mesa's llvmpipe, anything else).
 * FLASHCL_FORWARD_PATH chooses among those that can run: "nvidia-mma" (never nvidia-wgmma),
 * "portable" (the device's portable kernel, no tensor cores), "blocked" (also on CPUs; rows
 * where the device caps loops), "cpu" (also on GPUs; rows where the device caps loops) or
 * "rows". All meet the same tolerance; results differ in
 * rounding (the tensor-core paths round the probabilities to the storage dtype before P V).
 * Where a backward op recomputes O itself (O NULL, and fcl_attention_qkvo_backward) it takes
 * the device's portable kernel, whose O is the FP32-probability sum that the gradients assume;
 * a recomputed LSE alone comes from this path. Static string; NULL for a NULL ctx. Thread-safe.
 */
const char *fcl_attention_forward_path(fcl_context ctx, fcl_dtype dtype, int64_t head_dim);

/*
 * Which backward kernels run for `dtype` at head dim `head_dim` on ctx's device (dense, varlen
 * and packed backwards, and the attention inside fcl_attention_qkvo_backward): "nvidia-wgmma"
 * (Hopper's warpgroup tensor cores: compute capability 9.0, F16 or BF16, padded head dims 64 and
 * 128, unless FLASHCL_BACKWARD_PATH=nvidia-mma; the packed form's tiles run "nvidia-mma" there),
 * "nvidia-mma" (tensor cores through mma.sync: NVIDIA compute capability >= 8.0, F16 or BF16,
 * every head_dim), "cpu" (CPUs
 * without a loop cap: vertical SIMD across keys and rows, as the "cpu" forward), "blocked"
 * (GPUs without a loop cap, and any such device where FLASHCL_BACKWARD_PATH=blocked: each
 * tile's products as register-blocked GEMMs) or "portable" (any OpenCL device; also where
 * FLASHCL_BACKWARD_PATH=portable). All are deterministic (no
 * atomics) and meet the same tolerance; the tensor-core path rounds P and dS to the storage
 * dtype before their products. Static string; NULL for a NULL ctx. Thread-safe.
 */
const char *fcl_attention_backward_path(fcl_context ctx, fcl_dtype dtype, int64_t head_dim);

/* The most values of one tuned kernel ("decode" has 10; see fcl_tuning_save). */
#define FCL_TUNING_MAX_VALUES 10

/*
 * Tuned tiles: what `flashcl-bench --tune` finds, kept per device (name, vendor, driver and
 * platform) as one entry of the disk cache folder, read by every later context on that device.
 * Precedence: the built-in per-device table, then a tuned entry, then the FLASHCL_*_TILES
 * environment variables; then the device's limits. `kernel`:
 *   "forward"      3 values: query rows per work-group, keys per tile, rows per work-item
 *                  (the "rows" forward kernel)
 *   "forward_blocked" 4 values: query rows per work-group, keys per tile, rows and keys per
 *                  work-item, each dividing the first two, at most 256 / 256 / 16 / 16 (the
 *                  "blocked" forward kernel)
 *   "forward_cpu"  4 values: floats per vector (4, 8 or 16), row vectors per work-item (1 to
 *                  8), keys per tile (1 to 64), head dims per P V step (1, 2, 4, 8 or 16) (the
 *                  "cpu" forward kernel)
 *   "forward_mma"  5 values: query rows per work-group (a multiple of 16 x the third), keys per
 *                  tile (a multiple of 16), 16-row tiles per warp, register cap (0: compiler's),
 *                  k steps (16 head-dim columns each, 0 to 16) of the Q fragments held in local
 *                  memory instead of registers, lowered to what fits beside the K/V tiles (the
 *                  NVIDIA tensor-core forward; an entry stored with 4 values by 0.9 is ignored)
 *   "forward_wgmma" 4 values: keys per tile (64 or 128), K/V stages (1 or 2), register cap (0 to
 *                  255; 0: compiler's), overlap (1: the next key tile's Q K^T is issued behind
 *                  this tile's P V; 0: after it), the first two lowered to what fits the local
 *                  memory (the Hopper wgmma forward; head dims padded to 64 and 128 only)
 *   "backward_mma" 7 values: four multiples of 16 in [16, 256] (keys per dK/dV work-group,
 *                  query rows per dK/dV tile, query rows per dQ work-group, keys per dQ tile),
 *                  then k steps (0 to 16) of the K and V fragments the dK/dV kernel holds in
 *                  local memory instead of registers, lowered to what fits beside its Q/dO
 *                  tiles, then the most dK/dV and the most dQ columns per work-group
 *                  (multiples of 16 in [16, 256], lowered to the widest equal split of the
 *                  padded head dim into multiples of 16; a narrower split recomputes S and dP
 *                  once per slice) (the NVIDIA tensor-core backward; an entry stored with 4
 *                  values by 0.10 or 5 by 0.11-0.24 is ignored)
 *   "backward_blocks" 4 values: the work-group's own rows (keys of the dK/dV kernel, query rows
 *                  of the dQ kernel), the rows of the tile it walks, and of each per work-item,
 *                  each dividing the first two, at most 256 / 256 / 16 / 16 (the "blocked"
 *                  backward kernels of GPUs)
 *   "decode"       10 values, as FLASHCL_DECODE_TILES: keys per work-group and batch (1 to 1024),
 *                  most query rows per work-group (1 to 64), most work-items per work-group
 *                  (1 to 1024), work-groups per compute unit in one round (1 to 64), fewest
 *                  keys per split (0 to 1048576), register cap (0 to 255; 0: compiler's;
 *                  NVIDIA), cp.async stages (0, or 2 to 4; taken on NVIDIA compute capability
 *                  >= 8 only, 0 elsewhere), warps per work-group of the tensor-core form (0 to
 *                  8; 0: none; NVIDIA compute capability >= 8 only, where it replaces the first
 *                  three values: 16 keys per warp and step, 16 rows), work-items per key of the
 *                  three-phase form (0, or a power of two up to 32, lowered to one dividing the
 *                  head dim's 8-element chunks; where no cp.async or tensor-core form runs, it
 *                  replaces the team forms, its batch then the work-group over that count),
 *                  K read one batch ahead in the three-phase form (0 or 1)
 *                  (fcl_attention_decode; an entry stored with 7 values by 0.11, 8 by 0.21 or 9
 *                  by 0.22-0.30 is ignored)
 *   "gemm"         5 values, as FLASHCL_GEMM_TILES: rows and columns of C per work-group (1 to
 *                  256), K slice (1 to 64), rows and columns per work-item (1 to 16, dividing
 *                  the first two; at most 1024 work-items) (the projections' tiled portable GEMM
 *                  of GPUs and loop-capped devices; since 0.19). It has no head dim: an entry
 *                  saved at any `head_dim` serves every projection, and fcl_tuning_entry lists it
 *                  under 16.
 * An entry serves every head dim with the same padded size (16, then multiples of 32).
 * fcl_tuning_save stores `values` for `head_dim` (replacing an older entry) and uses them at
 * once: FCL_ERR_INVALID_ARGUMENT for an unknown kernel, a wrong count, head_dim outside
 * [1, 256] or invalid values; FCL_ERR_UNSUPPORTED when the disk cache is off. The caller should
 * only store tiles it has checked (flashcl-bench --tune stores a winner only after the float64
 * check). fcl_tuning_get writes the tiles that `kernel` would use at `head_dim` now into
 * values[0 .. n_values - 1] (forward_blocked / forward_cpu / forward_mma / forward_wgmma /
 * backward_mma / backward_blocks / gemm where that kernel does not exist: first value 0; forward_mma:
 * the tiles of long dense sequences, whose tiles of more than 64 keys run as 64-key tiles on
 * sequences of fewer than 2 such tiles and on varlen and packed batches, and packed batches at
 * head_dim <= 32 run two 16-row tiles per warp as one in half the rows; decode: the tiles of an F16
 * or BF16 cache (the table may hold others for F32 caches; a saved entry serves every dtype) and a KV head
 * with at least as many query rows (query heads per KV head x Lq) as the tiles hold, rows
 * rounded up to a power of two, keys and work-items as the work-group's shape gives them; a KV
 * head with fewer query rows runs fewer rows per work-group). Neither call enqueues anything.
 * Not thread-safe with other calls on the same context.
 */
fcl_status fcl_tuning_save(fcl_context ctx, const char *kernel, int head_dim, const int *values, int n_values);
fcl_status fcl_tuning_get(fcl_context ctx, const char *kernel, int head_dim, int *values, int n_values);

/* The number of tuned entries stored for ctx's device (0 when the disk cache is off). */
int fcl_tuning_count(fcl_context ctx);

/*
 * Entry `index` (0 .. fcl_tuning_count - 1) of ctx's device: its kernel name (copied into
 * `kernel`, which holds at least 16 chars), the padded head dim it serves (16, 32, 64, 96, ...:
 * every head dim that pads to it), and its values (FCL_TUNING_MAX_VALUES ints; *n_values of them
 * are used, as fcl_tuning_save describes). FCL_ERR_INVALID_ARGUMENT for an index out of range.
 */
fcl_status fcl_tuning_entry(fcl_context ctx, int index, char *kernel, int *head_dim_pad, int *values,
                            int *n_values);

/*
 * Forgets every tuned entry of ctx's device, on disk and in ctx: from then on the built-in table
 * (and the environment overrides) decide. Other live contexts on the device keep what they read.
 * FCL_ERR_UNSUPPORTED when the disk cache is off or cannot be written.
 */
fcl_status fcl_tuning_reset(fcl_context ctx);

/*
 * Variable-length forward: B sequences packed back to back, no padding, one launch.
 *  Q    [total_q, Hq, D], K and V [total_k, Hkv, D]  dtypes and GQA as fcl_attention_forward
 *  cu_seqlens_q, cu_seqlens_k  I32 [B + 1] device prefix sums: sequence b is Q rows
 *       [cu_seqlens_q[b], cu_seqlens_q[b+1]) and K/V rows [cu_seqlens_k[b], cu_seqlens_k[b+1]);
 *       empty sequences are allowed. Never attends across sequences.
 *  max_seqlen_q, max_seqlen_k  host bounds (>= 0) of every sequence's length, used to size
 *       the launch. The host does not read the device prefix sums (fcl_varlen_validate does,
 *       on request); the kernel clamps them to [0, total] and to these bounds, so whatever
 *       they hold nothing outside Q, K, V, O and LSE is read or written. With valid values
 *       every row of O is written; rows of a sequence longer than max_seqlen_q are not.
 *  params  per sequence: causal and windows bottom-right aligned inside each sequence
 *       (its own Sq, Sk); key_mask F32 [total_k] (one value per key row); alibi_slopes F32
 *       [Hq] or [B, Hq].
 *  O    [total_q, Hq, D] overwritten;  LSE  F32 [Hq, total_q] or NULL, overwritten.
 */
fcl_status fcl_attention_varlen_forward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q,
                                        fcl_tensor K, fcl_tensor V, fcl_tensor cu_seqlens_q,
                                        fcl_tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k,
                                        fcl_tensor O, fcl_tensor LSE, cl_event *event);

/*
 * Reads the prefix sums back (blocking) and checks them: each I32 [B + 1], starting at 0,
 * non-decreasing, ending at total_q / total_k, no sequence longer than max_seqlen_q /
 * max_seqlen_k. Returns FCL_ERR_INVALID_ARGUMENT with a message naming the first bad entry.
 */
fcl_status fcl_varlen_validate(fcl_context ctx, fcl_tensor cu_seqlens_q, fcl_tensor cu_seqlens_k,
                               int64_t total_q, int64_t total_k, int max_seqlen_q, int max_seqlen_k);

/*
 * Packed forward straight off a fused QKV projection (encoders): L rows of many sequences,
 * packed back to back; the launch shape depends only on L, never on the packing, and the
 * host never reads the bounds.
 *  QKV  [L, 3, H, D]  per row [q heads | k heads | v heads] (the (L, 3*H*D) projection output
 *       viewed with 4 dims); F32, F16 or BF16
 *  seq_bounds  I32 [L, 2]: row r's sequence is rows [seq_bounds[r,0], seq_bounds[r,1]) and
 *       should contain r. Values are clamped to [0, L] on the device; a row whose clamped
 *       range does not contain it still only reads inside QKV.
 *  params  row r sits at position r and sees key rows j of its sequence with
 *       r - window_left <= j <= r + window_right (the reference's bidirectional window w is
 *       window_left = window_right = w / 2); causal, softcap, ALiBi [H] and key_mask F32 [L]
 *       apply as elsewhere.
 *  O    [L, H, D] overwritten;  LSE  F32 [H, L] or NULL, overwritten.
 */
fcl_status fcl_attention_packed_qkv_forward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor QKV,
                                            fcl_tensor seq_bounds, fcl_tensor O, fcl_tensor LSE,
                                            cl_event *event);

/* ---------------------------------------------------------------- backward */

/*
 * Attention backward (FlashAttention-2 style, recompute-based, deterministic): given the
 * forward's inputs, its output O and the upstream gradient dO, overwrites dQ, dK and dV with
 * the exact gradients of the forward that `params` describes (pass the same params).
 *  Q, O, dO, dQ  [B, Sq, Hq, D]    F32, F16 or BF16 (all one dtype); O may be NULL, see below
 *  K, V, dK, dV  [B, Sk, Hkv, D]   same dtype; GQA/MQA: dK and dV of a KV head sum over the
 *                                  Hq / Hkv query heads that read it
 *  O    the forward's output, or NULL (then LSE must be NULL too)
 *  LSE  [B, Hq, Sq] F32 from the forward, or NULL: then O and LSE are recomputed by one extra
 *       forward pass into scratch memory (the size of O plus LSE); the given O is still used
 *       for rowsum(dO * O) when present
 *  params  as for the forward: scale, causal, windows, softcap (the gradient goes through the
 *       tanh), key_mask, ALiBi (constant offsets: no gradient for the slopes).
 * Keys or rows excluded by causal, window or mask (and rows that see no key) contribute
 * exactly zero; nothing is NaN. Accumulation is FP32; no atomics, so two runs give
 * bit-identical gradients. Strides as for the forward (last dim contiguous). dQ, dK, dV must
 * not overlap each other or any input. Enqueues a preprocessing kernel (rowsum(dO * O)), a
 * dK/dV kernel and a dQ kernel (several launches each on loop-capped devices such as Mesa
 * llvmpipe; and where dS is stored for the dQ kernel, one pair of dK/dV and dQ launches per
 * range of keys whose dS fits its scratch budget; same result). Scratch device memory comes from
 * the context's grow-only pool (kept until fcl_context_release); the stored dS ("blocked" and
 * "cpu" paths, "nvidia-mma" past head dim 160) takes up to a quarter of the device's memory
 * (FLASHCL_BACKWARD_DS_BYTES, docs/API.md). `event` as described at the top.
 */
fcl_status fcl_attention_backward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q,
                                  fcl_tensor K, fcl_tensor V, fcl_tensor O, fcl_tensor dO,
                                  fcl_tensor LSE, fcl_tensor dQ, fcl_tensor dK, fcl_tensor dV,
                                  cl_event *event);

/*
 * Variable-length backward: the layout and prefix sums of fcl_attention_varlen_forward.
 *  Q, O, dO, dQ [total_q, Hq, D];  K, V, dK, dV [total_k, Hkv, D];  LSE F32 [Hq, total_q] or
 *  NULL (recomputed; O may then be NULL too, as for fcl_attention_backward);  cu_seqlens_q/k I32 [B + 1] on the device;  max_seqlen_q/k host bounds.
 * Per-sequence semantics as the varlen forward: never crosses sequences; keys of an empty
 * query sequence and rows of an empty key sequence get zero gradients. With prefix sums that
 * break the forward's rules nothing outside the tensors is read or written, but rows outside
 * every sequence are left as they were. Otherwise as fcl_attention_backward.
 */
fcl_status fcl_attention_varlen_backward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q,
                                         fcl_tensor K, fcl_tensor V, fcl_tensor O, fcl_tensor dO,
                                         fcl_tensor LSE, fcl_tensor cu_seqlens_q, fcl_tensor cu_seqlens_k,
                                         int max_seqlen_q, int max_seqlen_k, fcl_tensor dQ, fcl_tensor dK,
                                         fcl_tensor dV, cl_event *event);

/*
 * Packed fused-QKV backward: the packing, bounds and params of fcl_attention_packed_qkv_forward.
 *  QKV  [L, 3, H, D] the forward's input;  O, dO [L, H, D];  LSE F32 [H, L]; O and LSE may be
 *       NULL (recomputed) as for fcl_attention_backward: the reference's recompute-only form
 *  seq_bounds I32 [L, 2] as passed to the forward (read only on the device)
 *  dQKV [L, 3, H, D] overwritten, per row [dQ heads | dK heads | dV heads]; must not overlap
 *       QKV, O, dO or LSE.
 * The launch depends only on L. Key row j's gradient gathers the query rows of j's own
 * sequence (seq_bounds[j]); with valid bounds (rows of one sequence share them and each
 * contains its row) this is the exact gradient. Otherwise as fcl_attention_backward.
 */
fcl_status fcl_attention_packed_qkv_backward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor QKV,
                                             fcl_tensor O, fcl_tensor dO, fcl_tensor LSE,
                                             fcl_tensor seq_bounds, fcl_tensor dQKV, cl_event *event);

/* ---------------------------------------------------------------- KV cache and decode */

/*
 * A KV cache, described by the caller's tensors (not owned; only read during each call).
 *  Contiguous (block_table NULL): k, v [B, L_max, Hkv, D], e.g. views of larger buffers.
 *  Paged (vLLM style): k, v are pages [num_pages, page_size, Hkv, D] (any page_size >= 1) and
 *  block_table is I32 [B, max_pages]: position j of sequence b is row j % page_size of page
 *  block_table[b, j / page_size]; L_max = max_pages * page_size. Page numbers are read on the
 *  device; one outside [0, num_pages) is never written (append) and reads page 0 or the last
 *  one (decode), never outside the pages.
 * k and v share one dtype (F32, F16 or BF16) and shape.
 */
typedef struct fcl_kv_cache {
    fcl_tensor k;
    fcl_tensor v;
    fcl_tensor block_table;
} fcl_kv_cache;

/*
 * Appends K_new, V_new [B, L_new, Hkv, D] (the cache's dtype) at each sequence's position:
 * row t of sequence b goes to cache position pos_b + t. Exactly one position form:
 *  pos >= 0 and positions NULL: pos_b = pos for every b; checked on the host
 *      (pos + L_new <= L_max, else FCL_ERR_INVALID_ARGUMENT and nothing written);
 *  pos == -1 and positions an I32 [B] device tensor: read on the device (the enqueue is the
 *      same every step); rows that would land outside [0, L_max) are skipped, never written.
 * Elements are copied bit for bit. K_new/V_new must not overlap the caches. One kernel.
 */
fcl_status fcl_kv_cache_append(fcl_context ctx, const fcl_kv_cache *cache, fcl_tensor K_new,
                               fcl_tensor V_new, int64_t pos, fcl_tensor positions, cl_event *event);

/*
 * Decode attention over a KV cache (flash-decoding: the cache is split among work-groups and
 * the partial softmax states are combined by a second small kernel).
 *  Q    [B, Lq, Hq, D], Lq >= 1: the last Lq positions of each sequence, causal among
 *       themselves (query t sits at position p = len_b - Lq + t and sees keys j <= p); the
 *       cache's dtype; Hq % Hkv == 0 (GQA native: each K/V tile is read once for all the
 *       query heads sharing it).
 *  cache  contiguous or paged, see fcl_kv_cache.
 *  The valid length len_b, exactly one form:
 *   len >= 0 (lens, mask NULL): the host's length for every sequence, 0 <= len <= L_max;
 *   len == -1, lens I32 [B] on the device: clamped to [0, L_max] there (the enqueue is the
 *       same every step; splits past the length exit without reading K/V);
 *   len == -1, mask F32 [B, L_max] (or [L_max]) on the device: keys with mask > 0.5 are
 *       valid and len_b is 1 + the last valid key (the queries sit at the end).
 *  params  scale, softcap, window_left (keys j >= p - window_left), alibi_slopes; decoding
 *       is causal by construction, so causal is implied and window_right must be -1 or 0;
 *       key_mask must be NULL (use the mask form).
 *  O    [B, Lq, Hq, D] overwritten;  LSE  F32 [B, Hq, Lq] or NULL, overwritten.
 * A query row with no visible key (length 0, or p < 0) writes O = 0 and LSE = -inf. The split
 * count depends on the device and on len (host form) or L_max (device forms), never on the
 * device values. Scratch for the partial states is kept by the context (allocated on the first
 * call, grown when a larger problem needs it), so a generation loop allocates nothing per step.
 */
fcl_status fcl_attention_decode(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q,
                                const fcl_kv_cache *cache, int64_t len, fcl_tensor lens,
                                fcl_tensor mask, fcl_tensor O, fcl_tensor LSE, cl_event *event);

/*
 * Which fcl_attention_decode kernel runs for `dtype` at head dim `head_dim` on ctx's device,
 * for caches whose rows are 16-byte aligned (offsets and strides; head_dim % 8 == 0) and a
 * length given as len or lens (a call outside that takes the next form that can run it):
 *   "nvidia-mma"      tensor cores through inline PTX mma.sync (NVIDIA compute capability
 *                     >= 8.0, F16 or BF16, head_dim <= 128, the device's decode tiles have
 *                     tensor-core warps; not with the mask form);
 *   "nvidia-shuffle"  teams of lanes inside warps that meet by shuffles (NVIDIA compute
 *                     capability >= 7.0), with a cp.async ring where the device has one;
 *   "three-phase"     devices whose tiles have key lanes (GPUs) where neither form above runs:
 *                     each batch of keys in three phases, Q K^T with a few work-items per key,
 *                     the softmax with one work-item per (key, query row), P V with the
 *                     work-items along the head dims; it takes the place of the two forms below;
 *   "subgroup-shuffle" the teams of "nvidia-shuffle" inside subgroups, on devices whose subgroup
 *                     size flashcl can fix (Intel's cl_intel_required_subgroup_size, with
 *                     cl_intel_subgroups or cl_khr_subgroup_shuffle), where the device's tiles
 *                     give teams of 2 or more lanes and no key lanes;
 *   "cpu"             CPUs (the device's tiles give one work-item per team; no loop cap): one
 *                     work-item per row block and split, vectors along the keys and head dims;
 *   "portable"        any OpenCL device (teams meeting in local memory).
 * FLASHCL_DECODE_PATH=portable keeps tensor cores out; FLASHCL_DECODE_SHUFFLE=0 takes the
 * three-phase form (or where the tiles have no key lanes the portable form) on NVIDIA and on
 * subgroup devices too; FLASHCL_SUBGROUPS=0 turns every subgroup
 * form off (read at context creation). All meet the same tolerance; the tensor-core form rounds the
 * probabilities to the storage dtype before P V. Static string; NULL for a NULL ctx.
 * Thread-safe.
 */
const char *fcl_attention_decode_path(fcl_context ctx, fcl_dtype dtype, int64_t head_dim);

/* ---------------------------------------------------------------- projections */

/*
 * One projection y = x W^T (+ bias): the caller's tensors, only read during a call.
 *  w      [N, K] (N output features, K inputs): F32, F16, BF16, or I8 (W8A16: then each output
 *         row n is w[n, :] * scale[n])
 *  scale  F32 [N] with I8 weights; NULL with float weights
 *  bias   [N] in the activations' dtype, or NULL
 * Activations are never quantised. I8 weights are converted on their way into the products (no
 * full-size copy), except on Hopper for GEMMs of at least 2048 rows with BF16 activations
 * (FLASHCL_GEMM_DEQUANT_ROWS=N sets the row count for both 16-bit dtypes, 0 never): there they
 * are first converted, exactly, into a scratch copy of N x K values of the activations' dtype
 * that the context keeps.
 */
typedef struct fcl_weight {
    fcl_tensor w;
    fcl_tensor scale;
    fcl_tensor bias;
} fcl_weight;

/*
 * Which GEMM runs a projection with activations `act` and weights `weight` on ctx's device:
 * "nvidia-wgmma" (Hopper's warpgroup tensor cores, compute capability 9.0, for the GEMMs whose
 * operands have 16-byte aligned rows along their unit-stride dimension: the forward projections,
 * the input and the weight gradients of aligned tensors; the others run "nvidia-mma"), "nvidia-mma" (NVIDIA tensor cores, compute capability >= 8.0: F16 or BF16
 * activations with weights of the same dtype or I8), "clblast-sgemm" (F32 / F32 where CLBlast is built in) or
 * "flashcl" (flashcl's own portable kernel: other dtype pairs, loop-capped devices such as
 * llvmpipe, or FLASHCL_GEMM=own, which also rules out the tensor cores; FLASHCL_GEMM=mma rules out
 * the wgmma GEMM only). A GEMM whose operands'
 * row strides are below their row lengths (a repeated row of stride 0, overlapping rows) runs
 * flashcl's portable kernel whatever this says. The backward's
 * weight-gradient GEMMs multiply activations only: they take the tensor cores wherever F16 or
 * BF16 activations with their own weights would. Every path accumulates in FP32: CLBlast's
 * HGEMM, which accumulates in half precision, is never used. Static string; NULL for a NULL ctx.
 */
const char *fcl_projection_path(fcl_context ctx, fcl_dtype act, fcl_dtype weight);

/*
 * K = Ctx Wk^T + bk and V = Ctx Wv^T + bv, the K/V the attention calls consume, computed once per
 * context (e.g. text conditioning reused across diffusion steps).
 *  Ctx [Lk, D_ctx] F32/F16/BF16;  wk, wv: w [D, D_ctx];  K, V [Lk, D] in Ctx's dtype, overwritten
 *  (view them as [1, Lk, H, D / H] for the attention calls). K, V must not overlap the inputs.
 */
fcl_status fcl_project_kv(fcl_context ctx, fcl_tensor Ctx, const fcl_weight *wk, const fcl_weight *wv,
                          fcl_tensor K, fcl_tensor V, cl_event *event);

/*
 * The attention block with its projections: Q = X Wq^T + bq; K, V from Ctx (cross-attention) or
 * from X (Ctx NULL: self-attention); O = attention(Q, K, V) Wo^T + bo, per `params` with Hq =
 * Hkv = num_heads over head_dim D / num_heads.
 *  X [Lq, D];  Ctx [Lk, D_ctx] or NULL (D_ctx may differ from D);  wq, wo: w [D, D];
 *  wk, wv: w [D, D_ctx];  O [Lq, D] in X's dtype, overwritten; must not overlap the inputs.
 * params.key_mask, when given, is F32 [Lk]. Scratch for Q, K, V and the attention output comes
 * from the context's grow-only pool.
 */
fcl_status fcl_attention_qkvo_forward(fcl_context ctx, const fcl_attn_params *params, int num_heads,
                                      fcl_tensor X, fcl_tensor Ctx, const fcl_weight *wq,
                                      const fcl_weight *wk, const fcl_weight *wv,
                                      const fcl_weight *wo, fcl_tensor O, cl_event *event);

/*
 * fcl_attention_qkvo_forward with K and V already projected (fcl_project_kv): Q = X Wq^T + bq,
 * O = attention(Q, K, V) Wo^T + bo. K, V [Lk, D] in X's dtype; numerically the same as
 * fcl_attention_qkvo_forward with those K and V.
 */
fcl_status fcl_attention_q_with_kv_cached_forward(fcl_context ctx, const fcl_attn_params *params,
                                                  int num_heads, fcl_tensor X, fcl_tensor K,
                                                  fcl_tensor V, const fcl_weight *wq,
                                                  const fcl_weight *wo, fcl_tensor O,
                                                  cl_event *event);

/* Gradient outputs of one projection: dw like the weight ([N, K], F32 or the activations'
 * dtype; for I8 weights the gradient of the dequantised weight w[n, k] * scale[n]) and db [N]
 * (same dtype as dw), both accumulated into (the caller zeros them). */
typedef struct fcl_weight_grad {
    fcl_tensor dw;
    fcl_tensor db;
} fcl_weight_grad;

/*
 * Backward of fcl_attention_qkvo_forward, recompute-based (it runs the forward again): pass the
 * same params, num_heads, X, Ctx and weights, and dO [Lq, D], the gradient of O.
 *  dX [Lq, D] overwritten; for self-attention (Ctx NULL) it includes the K and V paths:
 *      dX = dQ Wq + dK Wk + dV Wv.  dCtx [Lk, D_ctx] overwritten = dK Wk + dV Wv; NULL exactly
 *      when Ctx is NULL.
 *  gq, gk, gv, go: dw accumulated with dQ^T X, dK^T C, dV^T C, dO^T A (C = Ctx or X, A the
 *      attention output); db accumulated with the column sums; db must be given exactly when
 *      the forward's weight has a bias (and NULL otherwise), else FCL_ERR_INVALID_ARGUMENT.
 *      The key bias's gradient is exactly zero unless params.softcap > 0 (it shifts every score
 *      of a query row alike, which the softmax ignores): gk->db is then left as it is.
 * Causal- and mask-excluded positions contribute nothing. Deterministic (no atomics). Outputs
 * must not overlap the inputs or each other. Scratch comes from the context's grow-only pool.
 */
fcl_status fcl_attention_qkvo_backward(fcl_context ctx, const fcl_attn_params *params, int num_heads,
                                       fcl_tensor X, fcl_tensor Ctx, const fcl_weight *wq,
                                       const fcl_weight *wk, const fcl_weight *wv,
                                       const fcl_weight *wo, fcl_tensor dO, fcl_tensor dX,
                                       fcl_tensor dCtx, const fcl_weight_grad *gq,
                                       const fcl_weight_grad *gk, const fcl_weight_grad *gv,
                                       const fcl_weight_grad *go, cl_event *event);

/*
 * The activations of one fcl_attention_qkvo_forward that its backward otherwise recomputes
 * (training keeps them between the two calls). Tensors owned by the caller, in X's dtype unless
 * said: Q [Lq, D], K and V [Lk, D], A [Lq, D] (the attention output, before Wo), LSE
 * [num_heads, Lq] F32 (the natural-log sum of exp of each query row's scores).
 */
typedef struct fcl_qkvo_saved {
    fcl_tensor Q, K, V, A, LSE;
} fcl_qkvo_saved;

/*
 * fcl_attention_qkvo_forward that also writes its activations into `saved` (every tensor
 * overwritten; none may overlap another output, an input or a weight). O is bit-identical to
 * fcl_attention_qkvo_forward's. Costs no scratch for Q, K, V and A.
 */
fcl_status fcl_attention_qkvo_forward_save(fcl_context ctx, const fcl_attn_params *params, int num_heads,
                                           fcl_tensor X, fcl_tensor Ctx, const fcl_weight *wq,
                                           const fcl_weight *wk, const fcl_weight *wv,
                                           const fcl_weight *wo, fcl_tensor O,
                                           const fcl_qkvo_saved *saved, cl_event *event);

/*
 * fcl_attention_qkvo_backward from the activations that fcl_attention_qkvo_forward_save wrote
 * with the same params, num_heads, X, Ctx and weights (read only; X and Ctx are still read for
 * the weight gradients): the same outputs and rules, without running the forward again (for
 * the layer of docs/perf.md about a fifth less time, for 4 L D + H L values of memory).
 * The outputs must not overlap `saved` either.
 */
fcl_status fcl_attention_qkvo_backward_saved(fcl_context ctx, const fcl_attn_params *params, int num_heads,
                                             fcl_tensor X, fcl_tensor Ctx, const fcl_weight *wq,
                                             const fcl_weight *wk, const fcl_weight *wv,
                                             const fcl_weight *wo, const fcl_qkvo_saved *saved,
                                             fcl_tensor dO, fcl_tensor dX, fcl_tensor dCtx,
                                             const fcl_weight_grad *gq, const fcl_weight_grad *gk,
                                             const fcl_weight_grad *gv, const fcl_weight_grad *go,
                                             cl_event *event);

/* ---------------------------------------------------------------- ahead-of-time warm-up */

/* Op families fcl_precompile warms (bits of fcl_precompile_spec.ops). */
#define FCL_PRECOMPILE_FORWARD (1u << 0)    /* fcl_attention_forward */
#define FCL_PRECOMPILE_VARLEN (1u << 1)     /* fcl_attention_varlen_forward */
#define FCL_PRECOMPILE_PACKED_QKV (1u << 2) /* fcl_attention_packed_qkv_forward */
#define FCL_PRECOMPILE_DECODE (1u << 3)     /* fcl_kv_cache_append and fcl_attention_decode */
#define FCL_PRECOMPILE_QKVO (1u << 4)       /* fcl_attention_qkvo_forward, self-attention */
#define FCL_PRECOMPILE_BACKWARD (1u << 5)   /* the gradients of each forward family chosen too */
#define FCL_PRECOMPILE_ALL 0x3fu

/* What every warmed call uses (bits of fcl_precompile_spec.features): each takes kernels of its
 * own, so warm the combinations the deployment calls (one fcl_precompile per combination). */
#define FCL_PRECOMPILE_CAUSAL (1u << 0)   /* params.causal */
#define FCL_PRECOMPILE_SOFTCAP (1u << 1)  /* params.softcap > 0 */
#define FCL_PRECOMPILE_KEY_MASK (1u << 2) /* params.key_mask; decode: the mask length form */
#define FCL_PRECOMPILE_ALIBI (1u << 3)    /* params.alibi_slopes ([Hq]) */
#define FCL_PRECOMPILE_BIAS (1u << 4)     /* qkvo: every projection has a bias */

/*
 * The calls a deployment makes, for fcl_precompile. Start from FCL_PRECOMPILE_SPEC_INIT.
 *  ops, features   the bits above
 *  dtypes          n_dtypes activation dtypes (F32, F16, BF16), each warmed
 *  head_dims       n_head_dims head dims (1..FCL_MAX_HEAD_DIM), each warmed
 *  batch           B: batches (forward, backward), sequences (varlen, packed_qkv), cached
 *                  sequences (decode)
 *  seq_q, seq_k    query and key rows: forward Sq, Sk; varlen every sequence's lengths; packed_qkv
 *                  every sequence's length (seq_q); decode query rows per step Lq (1 when
 *                  generating) and the cache length L_max; qkvo Lq (seq_q)
 *  num_heads, num_kv_heads   Hq and Hkv (Hq % Hkv == 0; packed_qkv and qkvo use num_heads)
 *  page_size       decode: 0 for a contiguous cache, else a paged one of that page size
 *  weight_dtype    qkvo: F32, F16, BF16 or I8 weights ([D, D], D = num_heads x head_dim)
 */
typedef struct fcl_precompile_spec {
    unsigned ops;
    unsigned features;
    const fcl_dtype *dtypes;
    int n_dtypes;
    const int *head_dims;
    int n_head_dims;
    int batch;
    int seq_q, seq_k;
    int num_heads, num_kv_heads;
    int page_size;
    fcl_dtype weight_dtype;
} fcl_precompile_spec;

#define FCL_PRECOMPILE_SPEC_INIT { 0u, 0u, NULL, 0, NULL, 0, 1, 1, 1, 1, 1, 0, FCL_F32 }

/*
 * Builds every kernel variant the calls of `spec` use, so that the deployment's first calls
 * compile nothing: each op family of spec->ops runs once per dtype and head dim, at the spec's
 * shapes, on zero-filled temporary tensors (released before it returns; B x seq x heads x
 * head_dim elements each, as the real call's), with the spec's features, through the same
 * kernel choice as any call. That choice may depend on the lengths (on CPUs the forward reads F32
 * K/V in place up to 1024 query rows per KV head and fits its row vectors to short sequences), so
 * warm each length range the deployment calls. Decode runs with the host length at L_max and at 1
 * (its split and one-split forms), with a device length tensor, and with the mask form under
 * FCL_PRECOMPILE_KEY_MASK; kv_cache_append with host and device positions; backward (with O and
 * LSE given) and qkvo backward take F32 weight gradients. Contiguous tensors are used: views
 * whose offsets and strides are multiples of 8 elements take the same kernels.
 * The programs go where compiled programs go (fcl_context_cache_dir): a cache folder filled
 * once per device model and driver can be shipped to a fleet (FLASHCL_CACHE_DIR); entries are
 * keyed by the kernel source, options, device, driver, platform and library version, so those of
 * another device or driver are never used there. On PoCL, which keeps its own kernel cache,
 * flashcl stores no programs unless FLASHCL_CACHE_PROGRAMS=1; fcl_precompile then fills PoCL's
 * cache (POCL_CACHE_DIR), including the kernels PoCL compiles per launch shape at the first
 * enqueue, since the kernels run. Blocks until the runs complete (fcl_finish).
 * Errors: FCL_ERR_INVALID_ARGUMENT for a NULL spec, no or unknown ops or features, no dtypes
 * or head dims, a head dim or shape below 1 (page_size below 0); else the status of the first call that
 * failed, with its message prefixed by the op, dtype and head dim. The calls before it have run.
 */
fcl_status fcl_precompile(fcl_context ctx, const fcl_precompile_spec *spec);

/* ---------------------------------------------------------------- ABI check */

/*
 * The layout of a public struct as this library was compiled: with `field` NULL, sizeof(struct
 * `name`) ("fcl_attn_params", "fcl_device_info", "fcl_cache_stats", "fcl_kv_cache",
 * "fcl_weight", "fcl_weight_grad"); else offsetof(name, field), field spelled as in this header.
 * (size_t)-1 for an unknown name or field. For bindings that re-declare the structs (the Python
 * package checks its copies at import). Thread-safe.
 */
size_t fcl_struct_layout(const char *name, const char *field);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* FLASHCL_H */

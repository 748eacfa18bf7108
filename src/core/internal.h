/* SPDX-License-Identifier: Apache-2.0 */
/* Internal declarations shared by the host sources (never installed). */
#ifndef FLASHCL_INTERNAL_H
#define FLASHCL_INTERNAL_H

#include <flashcl/flashcl.h>
#include <pthread.h>
#include <stdarg.h>

#define FCL_ERROR_MAX 512

/* One compiled program of a context, with the kernels taken from it so far: a node of the
 * context's program list (filled by src/programs/program_cache.c, released with the context). */
#define FCL_KERNELS_PER_PROGRAM 8
typedef struct fcl_program_entry {
    char *key; /* source names and options */
    cl_program program;
    int n_kernels;
    char *kernel_names[FCL_KERNELS_PER_PROGRAM];
    cl_kernel kernels[FCL_KERNELS_PER_PROGRAM];
    struct fcl_program_entry *next;
} fcl_program_entry;

/* Scratch slots kept by a context across calls (grow-only device buffers), one per use so that
 * no two uses in flight share one; reuse is safe because the queue is in-order. */
enum {
    FCL_SCRATCH_DECODE_PARTIAL, FCL_SCRATCH_DECODE_LENS, /* decode: split state, device lengths */
    FCL_SCRATCH_FWD_STATE,                                /* forward: chunk state */
    FCL_SCRATCH_BWD_DELTA, FCL_SCRATCH_BWD_DKDV_STATE, FCL_SCRATCH_BWD_DQ_STATE, /* backward */
    FCL_SCRATCH_BWD_O, FCL_SCRATCH_BWD_LSE,               /* backward: recomputed O, LSE */
    FCL_SCRATCH_BWD_SCORES,                               /* backward: stored dS */
    FCL_SCRATCH_PROJ_KV, FCL_SCRATCH_PROJ_QA,             /* qkvo forwards: K, V; Q, attention */
    FCL_SCRATCH_PROJ_GRAD_ACT, FCL_SCRATCH_PROJ_GRAD_LSE, /* qkvo backward: activations, LSE */
    FCL_SCRATCH_GEMM_PARTIAL, FCL_SCRATCH_BIAS_PARTIAL,   /* split-K GEMM and bias-gradient sums */
    FCL_SCRATCH_GEMM_WEIGHTS,                             /* I8 weights converted for a long GEMM */
    FCL_SCRATCH_SLOTS
};

/* One tuned-tiles entry (src/tuning/tuned.c): kernel name, padded head dim, values (as many as
 * fcl_tuned_value_count gives the kernel; the rest 0). */
#define FCL_TUNED_MAX 64
typedef struct fcl_tuned_entry {
    char kernel[16];
    int head_dim_pad;
    int values[FCL_TUNING_MAX_VALUES];
} fcl_tuned_entry;

struct fcl_context_s {
    uint64_t id;                   /* unique in the process (from 1): keys the threads' error messages */
    pthread_mutex_t lock;          /* recursive; held by every public call on the context (FCL_LOCK) */
    cl_context cl_ctx;
    cl_device_id device;
    cl_command_queue queue;
    cl_platform_id platform;
    fcl_device_info info;
    char *cache_dir;               /* NULL: disk cache off */
    int programs_on_disk;          /* compiled programs go to cache_dir (fcl_programs_on_disk) */
    int wgmma_refused;             /* the driver refused an sm_90a promotion: no wgmma kernels */
    int subgroup_size;             /* > 0: the portable kernels' subgroup forms run with subgroups of
                                    * this size, which the host fixes (Intel's
                                    * cl_intel_required_subgroup_size) on a device with shuffles
                                    * (cl_intel_subgroups, or cl_khr_subgroups + _shuffle); 0: none,
                                    * or FLASHCL_SUBGROUPS=0 */
    fcl_cache_stats stats;
    fcl_program_entry *programs;   /* in-memory program cache (linked list) */
    cl_mem scratch[FCL_SCRATCH_SLOTS]; /* see fcl_scratch_buffer */
    size_t scratch_bytes[FCL_SCRATCH_SLOTS];
    fcl_tuned_entry tuned[FCL_TUNED_MAX]; /* this device's tuned tiles, read from the disk cache */
    int n_tuned;
    int tuned_loaded;              /* tuned[] was read (at the first lookup) */
};

struct fcl_tensor_s {
    fcl_context ctx;
    cl_mem buffer;                 /* retained by this tensor */
    size_t buffer_bytes;
    fcl_dtype dtype;
    int ndim;
    int64_t shape[FCL_MAX_DIMS];
    int64_t strides[FCL_MAX_DIMS]; /* elements */
    int64_t offset;                /* elements */
};

/* Records a message as the calling thread's last one on ctx (or in the thread's context-free
 * slot when ctx is NULL) and returns `status`, so callers write
 * `return fcl_fail(ctx, FCL_ERR_SHAPE, "...", ...)`. */
fcl_status fcl_fail(fcl_context ctx, fcl_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Clears the calling thread's message on ctx at the start of a call. */
void fcl_clear_error(fcl_context ctx);
/* Maps an OpenCL error to FCL_ERR_OPENCL / FCL_ERR_OUT_OF_MEMORY with a message naming `what`. */
fcl_status fcl_fail_cl(fcl_context ctx, cl_int err, const char *what);
/* The name of an OpenCL error code ("CL_OUT_OF_RESOURCES"). */
const char *fcl_cl_error_name(cl_int err);

/* Takes ctx's lock (nothing for NULL) and returns ctx; FCL_LOCK's release is fcl_context_unlock. */
fcl_context fcl_context_lock(fcl_context ctx);
void fcl_context_unlock(fcl_context *held);
/* Holds ctx's lock (recursive; nothing when ctx is NULL) until the enclosing block ends: the
 * first statement of every public call that touches a context or its tensors, so calls from
 * several threads on one context run one at a time. */
#define FCL_LOCK(ctx) \
    fcl_context fcl_held_ __attribute__((cleanup(fcl_context_unlock), unused)) = fcl_context_lock(ctx)

/* The lock (striped by the device handle) that serialises loading programs from cached binaries
 * and releasing programs on `device`: PoCL 3.1, its kernel cache off, aborted when threads of
 * several contexts did either at once. */
pthread_mutex_t *fcl_device_program_lock(cl_device_id device);

/* Device capability query used at context creation. */
fcl_status fcl_query_device_info(fcl_context ctx);

/* A contiguous row-major tensor struct over `buffer` (ops' scratch views; not reference
 * counted, never released: the caller owns the buffer). */
struct fcl_tensor_s fcl_scratch_view(fcl_context ctx, cl_mem buffer, fcl_dtype dtype, int ndim,
                                     const int64_t *shape);

/* FCL_SUCCESS when n fits the host's size_t; else FCL_ERR_UNSUPPORTED with a message naming
 * `what` and n ("fcl_tensor_create: byte size 8589934592 is beyond this host's 32-bit size_t"). Counts that the host passes to OpenCL as size_t (buffer
 * sizes, offsets, work-items) are computed in 64 bits and checked here: on a 32-bit host a cast
 * would wrap them. */
fcl_status fcl_check_host_size(fcl_context ctx, const char *what, uint64_t n);

/* The context's scratch buffer of `slot`, at least `bytes` long (grown when smaller; the old
 * one is released and freed once the commands using it complete). Owned by the context, valid
 * until the next request of the same slot; NULL with *s set on failure (FCL_ERR_UNSUPPORTED
 * when `bytes` is beyond the host's size_t). */
cl_mem fcl_scratch_buffer(fcl_context ctx, int slot, uint64_t bytes, fcl_status *s);
/* Releases every scratch buffer of ctx. */
void fcl_scratch_release(fcl_context ctx);

/* Tensor helpers for op validation. */
int fcl_tensor_is_f_activation(fcl_dtype d); /* F32, F16 or BF16 */
/* "[2, 128, 8, 64]" into buf. */
const char *fcl_shape_str(fcl_tensor t, char *buf, size_t n);

#endif

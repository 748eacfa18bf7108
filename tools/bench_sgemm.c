/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench op "sgemm": CLBlast SGEMM (row-major, M = N = K = n) on the flashcl
 * context's own cl_context and queue, the FLOP ceiling a CPU/GPU benchmark is read against.
 * A CLBlast or OpenCL failure is reported in the result (ok = 0, status), never fatal. */
#include "bench.h"

#include <clblast_c.h>
#include <stdlib.h>

#define SGEMM_SEED 404u

typedef struct sgemm_bufs {
    cl_mem a, b, c;
} sgemm_bufs;

static void release_bufs(sgemm_bufs *g)
{
    if (g->a) clReleaseMemObject(g->a);
    if (g->b) clReleaseMemObject(g->b);
    if (g->c) clReleaseMemObject(g->c);
}

/* Creates A, B, C (n x n floats) with random A and B; returns an OpenCL status. */
static cl_int make_bufs(const bench_env *env, long n, sgemm_bufs *g)
{
    cl_context cl = fcl_context_cl_context(env->ctx);
    cl_command_queue q = fcl_context_cl_queue(env->ctx);
    size_t count = (size_t)n * (size_t)n, bytes = count * sizeof(float);
    cl_int err = CL_SUCCESS;
    if ((uint64_t)bytes > env->info.max_alloc_bytes || 3 * (uint64_t)bytes > env->info.global_mem_bytes)
        return CL_INVALID_BUFFER_SIZE; /* larger than the device takes */
    float *host = malloc(bytes);
    if (!host)
        return CL_OUT_OF_HOST_MEMORY;
    bench_fill_random(host, count, SGEMM_SEED, FCL_F32);
    g->a = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err == CL_SUCCESS)
        g->b = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err == CL_SUCCESS)
        g->c = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(q, g->a, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(q, g->b, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    free(host);
    return err;
}

typedef struct sgemm_call {
    cl_command_queue q;
    long n;
    const sgemm_bufs *g;
    int status; /* CLBlast status of the last call */
} sgemm_call;

/* Enqueues one C = A * B. No event is returned: CLBlast may run several kernels (padding,
 * transposes) and its event covers only the last, so only the wall time is meaningful. */
static fcl_status enqueue_sgemm(void *arg, cl_event *ev)
{
    (void)ev;
    sgemm_call *c = arg;
    size_t n = (size_t)c->n;
    CLBlastStatusCode s = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo,
                                       n, n, n, 1.0f, c->g->a, 0, n, c->g->b, 0, n, 0.0f, c->g->c, 0,
                                       n, &c->q, NULL);
    c->status = (int)s;
    return s == CLBlastSuccess ? FCL_SUCCESS : FCL_ERR_OPENCL;
}

void bench_sgemm(const bench_env *env, long n, sgemm_result *r)
{
    cl_command_queue q = fcl_context_cl_queue(env->ctx);
    sgemm_bufs g = {0};
    r->m = r->n = r->k = n;
    r->reps = 0;
    r->ms = r->ms_event = r->tflops = 0.0;
    sgemm_call call = {q, n, &g, 0};
    bench_env env1 = *env;
    bench_timing t;
    /* One untimed run even with --warmup 0: CLBlast compiles its kernels on first use. */
    env1.warmup = env->warmup > 0 ? env->warmup : 1;
    r->status = (int)make_bufs(env, n, &g);
    fcl_status st = r->status ? FCL_SUCCESS : bench_time(&env1, enqueue_sgemm, &call, &t);
    if (st != FCL_SUCCESS && !call.status) { /* CLBlast enqueued; waiting failed */
        fprintf(stderr, "flashcl-bench: sgemm: %s: %s\n", fcl_status_string(st), fcl_last_error(env->ctx));
        call.status = CLBlastUnknownError;
    }
    if (st != FCL_SUCCESS)
        r->status = call.status;
    if (!r->status) {
        r->reps = t.reps;
        r->ms = t.ms_wall;
        r->ms_event = t.ms_event;
        r->tflops = 2.0 * (double)n * (double)n * (double)n / (r->ms * 1e-3) * 1e-12;
    }
    r->ok = r->status == 0;
    clFinish(q);
    release_bufs(&g);
    CLBlastClearCache();
}

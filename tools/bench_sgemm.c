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
static cl_int make_bufs(cl_context cl, cl_command_queue q, long n, sgemm_bufs *g)
{
    size_t count = (size_t)n * (size_t)n, bytes = count * sizeof(float);
    cl_int err = CL_SUCCESS;
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

/* One C = A * B, finished; returns a CLBlast (or OpenCL) status. */
static int run_once(cl_command_queue q, long n, const sgemm_bufs *g)
{
    size_t un = (size_t)n;
    CLBlastStatusCode s = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo,
                                       un, un, un, 1.0f, g->a, 0, un, g->b, 0, un, 0.0f, g->c, 0,
                                       un, &q, NULL);
    if (s != CLBlastSuccess)
        return (int)s;
    return (int)clFinish(q);
}

/* Warmup, then the median of reps timed runs; returns a status. */
static int time_sgemm(const bench_env *env, cl_command_queue q, const sgemm_bufs *g, long n,
                      double *ms)
{
    double *t = malloc(sizeof *t * (size_t)env->reps);
    int s = t ? 0 : CL_OUT_OF_HOST_MEMORY;
    for (int i = 0; !s && i < env->warmup + env->reps; i++) {
        double t0 = bench_now_ms();
        s = run_once(q, n, g);
        if (i >= env->warmup)
            t[i - env->warmup] = bench_now_ms() - t0;
    }
    if (!s)
        *ms = bench_median(t, env->reps);
    free(t);
    return s;
}

void bench_sgemm(const bench_env *env, long n, sgemm_result *r)
{
    cl_context cl = fcl_context_cl_context(env->ctx);
    cl_command_queue q = fcl_context_cl_queue(env->ctx);
    sgemm_bufs g = {0};
    r->m = r->n = r->k = n;
    r->ms = r->tflops = 0.0;
    r->status = (int)make_bufs(cl, q, n, &g);
    if (!r->status) {
        /* One untimed run even with --warmup 0: CLBlast compiles its kernels on first use. */
        r->status = run_once(q, n, &g);
    }
    if (!r->status)
        r->status = time_sgemm(env, q, &g, n, &r->ms);
    if (!r->status)
        r->tflops = 2.0 * (double)n * n * n / (r->ms * 1e-3) * 1e-12;
    r->ok = r->status == 0;
    clFinish(q);
    release_bufs(&g);
    CLBlastClearCache();
}

/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench timing: warmup runs, then per timed run the wall clock around the enqueue +
 * fcl_finish and around the enqueue alone, and the device time of the op's event (CL
 * profiling) when the queue has it; then as many runs (fewer on slow devices) between two
 * profiled markers (the span: the clock of CUDA events recorded around a call); with
 * --back-to-back N, then N calls without a wait between them and one fcl_finish.
 * When the rep count is the default (env->reps_auto), timing stops early once the timed runs
 * have taken BENCH_TIME_BUDGET_MS, so slow devices (llvmpipe) finish the suite in time. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>

#define BENCH_TIME_BUDGET_MS 4000.0

/* Device milliseconds of a finished event; NaN when profiling is unavailable. */
static double event_ms(cl_event ev)
{
    cl_ulong t0 = 0, t1 = 0;
    if (!ev || clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL) ||
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) || t1 <= t0)
        return NAN;
    return (double)(t1 - t0) * 1e-6;
}

/* One run: enqueue, finish; *wall, *enq (the enqueue alone) and *dev get its times. */
static fcl_status run_once(const bench_env *env, bench_enqueue_fn fn, void *arg, double *wall,
                           double *enq, double *dev)
{
    cl_event ev = NULL;
    double t0 = bench_now_ms();
    fcl_status st = fn(arg, &ev);
    *enq = bench_now_ms() - t0;
    if (st == FCL_SUCCESS)
        st = fcl_finish(env->ctx);
    *wall = bench_now_ms() - t0;
    *dev = st == FCL_SUCCESS ? event_ms(ev) : NAN;
    if (ev)
        clReleaseEvent(ev);
    return st;
}

/* The device clock from the end of a marker enqueued (and flushed) before the call to the end
 * of one enqueued after it, the call asking for no event of its own: what CUDA events recorded
 * around a call measure (the SDPA peer's clock). It holds the host's enqueue, during which the
 * device waits, but not the wake-up from the wait. *span is NaN where markers have no times. */
static fcl_status run_span(const bench_env *env, bench_enqueue_fn fn, void *arg, double *span)
{
    cl_command_queue q = fcl_context_cl_queue(env->ctx);
    cl_event before = NULL, after = NULL;
    *span = NAN;
    if (clEnqueueMarkerWithWaitList(q, 0, NULL, &before) != CL_SUCCESS)
        before = NULL;
    clFlush(q);
    fcl_status st = fn(arg, NULL);
    if (st == FCL_SUCCESS && before && clEnqueueMarkerWithWaitList(q, 0, NULL, &after) != CL_SUCCESS)
        after = NULL;
    if (st == FCL_SUCCESS)
        st = fcl_finish(env->ctx);
    cl_ulong t0 = 0, t1 = 0;
    if (st == FCL_SUCCESS && after &&
        clGetEventProfilingInfo(before, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL) == CL_SUCCESS &&
        clGetEventProfilingInfo(after, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) == CL_SUCCESS && t1 > t0)
        *span = (double)(t1 - t0) * 1e-6;
    if (before)
        clReleaseEvent(before);
    if (after)
        clReleaseEvent(after);
    return st;
}

/* env->back_to_back calls enqueued without a wait between them, then one fcl_finish: the wall
 * time per call into *ms (0 when env->back_to_back is 0). */
static fcl_status back_to_back(const bench_env *env, bench_enqueue_fn fn, void *arg, double *ms)
{
    *ms = 0.0;
    if (env->back_to_back <= 0)
        return FCL_SUCCESS;
    fcl_status st = FCL_SUCCESS;
    const double t0 = bench_now_ms();
    for (int i = 0; st == FCL_SUCCESS && i < env->back_to_back; i++) {
        cl_event ev = NULL;
        st = fn(arg, &ev);
        if (ev)
            clReleaseEvent(ev);
    }
    if (st == FCL_SUCCESS)
        st = fcl_finish(env->ctx);
    *ms = (bench_now_ms() - t0) / env->back_to_back;
    return st;
}

fcl_status bench_time(const bench_env *env, bench_enqueue_fn fn, void *arg, bench_timing *out)
{
    double *wall = malloc(sizeof *wall * (size_t)env->reps);
    double *dev = malloc(sizeof *dev * (size_t)env->reps);
    double *enq = malloc(sizeof *enq * (size_t)env->reps);
    double *span = malloc(sizeof *span * (size_t)env->reps);
    fcl_status st = wall && dev && enq && span ? FCL_SUCCESS : FCL_ERR_OUT_OF_MEMORY;
    double w, e, d, spent = 0.0;
    int n = 0, have_dev = 1;
    for (int i = 0; st == FCL_SUCCESS && i < env->warmup; i++)
        st = run_once(env, fn, arg, &w, &e, &d);
    while (st == FCL_SUCCESS && n < env->reps && !(env->reps_auto && spent >= BENCH_TIME_BUDGET_MS)) {
        st = run_once(env, fn, arg, &wall[n], &enq[n], &dev[n]);
        spent += wall[n];
        have_dev = have_dev && !isnan(dev[n]);
        n++;
    }
    /* as many span runs as timed runs; with the default rep count, no more once they have
     * taken a quarter of the budget */
    int n_span = 0, have_span = 1;
    const double span_start = bench_now_ms();
    while (st == FCL_SUCCESS && n_span < n && have_span &&
           !(env->reps_auto && n_span > 0 && bench_now_ms() - span_start >= BENCH_TIME_BUDGET_MS / 4)) {
        st = run_span(env, fn, arg, &span[n_span]);
        have_span = !isnan(span[n_span++]);
    }
    if (st == FCL_SUCCESS)
        st = back_to_back(env, fn, arg, &out->ms_back_to_back);
    if (st == FCL_SUCCESS) {
        out->reps = n;
        out->ms_wall = bench_median(wall, n);
        out->ms_enqueue = bench_median(enq, n);
        out->ms_event = have_dev ? bench_median(dev, n) : NAN;
        out->ms_span = have_span && n_span > 0 ? bench_median(span, n_span) : NAN;
        /* Rusticl (Mesa 22) reports START/END microseconds apart for second-long kernels:
         * a device time under 1/1000 of the wall time is not believed. */
        if (out->ms_event < out->ms_wall * 1e-3)
            out->ms_event = NAN;
        if (out->ms_span < out->ms_wall * 1e-3)
            out->ms_span = NAN;
    }
    free(wall);
    free(dev);
    free(enq);
    free(span);
    return st;
}

int bench_time_op(const bench_env *env, bench_enqueue_fn fn, void *arg, const char *op, bench_result *r)
{
    bench_timing t;
    fcl_status st = bench_time(env, fn, arg, &t);
    if (st)
        return bench_lib_error(env, op, st);
    r->reps = t.reps;
    r->ms = t.ms_wall;
    r->ms_enqueue = t.ms_enqueue;
    r->ms_event = t.ms_event;
    r->ms_span = t.ms_span;
    r->ms_back_to_back = t.ms_back_to_back;
    return 0;
}

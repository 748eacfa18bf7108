/* flashcl-bench timing: warmup runs, then per timed run the wall clock around the enqueue +
 * fcl_finish, and the device time of the op's event (CL profiling) when the queue has it. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>

/* Device milliseconds of a finished event; NaN when profiling is unavailable. */
static double event_ms(cl_event ev)
{
    cl_ulong t0 = 0, t1 = 0;
    if (!ev || clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL) ||
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) || t1 < t0)
        return NAN;
    return (double)(t1 - t0) * 1e-6;
}

/* One run: enqueue, finish; *wall and *dev get its times. */
static fcl_status run_once(const bench_env *env, bench_enqueue_fn fn, void *arg, double *wall,
                           double *dev)
{
    cl_event ev = NULL;
    double t0 = bench_now_ms();
    fcl_status st = fn(arg, &ev);
    if (st == FCL_SUCCESS)
        st = fcl_finish(env->ctx);
    *wall = bench_now_ms() - t0;
    *dev = st == FCL_SUCCESS ? event_ms(ev) : NAN;
    if (ev)
        clReleaseEvent(ev);
    return st;
}

fcl_status bench_time(const bench_env *env, bench_enqueue_fn fn, void *arg, bench_timing *out)
{
    double *wall = malloc(sizeof *wall * (size_t)env->reps);
    double *dev = malloc(sizeof *dev * (size_t)env->reps);
    fcl_status st = wall && dev ? FCL_SUCCESS : FCL_ERR_OUT_OF_MEMORY;
    double w, d;
    int have_dev = 1;
    for (int i = 0; st == FCL_SUCCESS && i < env->warmup + env->reps; i++) {
        st = run_once(env, fn, arg, &w, &d);
        if (i >= env->warmup) {
            wall[i - env->warmup] = w;
            dev[i - env->warmup] = d;
            have_dev = have_dev && !isnan(d);
        }
    }
    if (st == FCL_SUCCESS) {
        out->ms_wall = bench_median(wall, env->reps);
        out->ms_event = have_dev ? bench_median(dev, env->reps) : NAN;
    }
    free(wall);
    free(dev);
    return st;
}

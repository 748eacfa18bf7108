/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libflashcl-kernel-profile.so: the device time of every OpenCL kernel a program launches, for
 * reading where an op's time goes (e.g. fcl_attention_qkvo_backward's GEMMs against its attention
 * kernels). Preload it into any OpenCL program (Linux, glibc):
 *
 *   LD_PRELOAD=build/tools/libflashcl-kernel-profile.so build/tools/flashcl-bench --op qkvo_backward ...
 *
 * It adds CL_QUEUE_PROFILING_ENABLE to every command queue created, takes the event of every
 * clEnqueueNDRangeKernel, and at clFinish and at exit reads the events' start and end times.
 * At exit it prints to stderr one line per (kernel name, global size): launches, total and mean
 * microseconds. Single-threaded programs only (no locking); a measuring tool, never linked into
 * the library.
 */
#define _GNU_SOURCE
#undef CL_TARGET_OPENCL_VERSION /* the build's 1.2 target hides the 2.0 queue call replaced here */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ROWS = 512, MAX_PENDING = 4096, KEY_LEN = 160 };

typedef struct row {
    char key[KEY_LEN]; /* "name [g0,g1,g2]" */
    double us;
    long launches;
} row;

static row rows[MAX_ROWS];
static int n_rows;
static cl_event pending[MAX_PENDING];
static char pending_key[MAX_PENDING][KEY_LEN];
static int n_pending;

/* Adds the pending events' device times to their rows and releases them. */
static void collect(void)
{
    for (int i = 0; i < n_pending; i++) {
        cl_ulong start = 0, end = 0;
        clWaitForEvents(1, &pending[i]);
        clGetEventProfilingInfo(pending[i], CL_PROFILING_COMMAND_START, sizeof start, &start, NULL);
        clGetEventProfilingInfo(pending[i], CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
        clReleaseEvent(pending[i]);
        int j = 0;
        while (j < n_rows && strcmp(rows[j].key, pending_key[i]) != 0)
            j++;
        if (j == n_rows) {
            if (n_rows == MAX_ROWS)
                continue;
            memcpy(rows[n_rows++].key, pending_key[i], KEY_LEN);
        }
        rows[j].us += (double)(end - start) * 1e-3;
        rows[j].launches++;
    }
    n_pending = 0;
}

static void report(void)
{
    collect();
    if (n_rows == 0)
        return;
    double total = 0.0;
    fprintf(stderr, "kernel-profile: %-60s %8s %12s %10s\n", "kernel [global size]", "launches", "total us",
            "mean us");
    for (int j = 0; j < n_rows; j++) {
        total += rows[j].us;
        fprintf(stderr, "kernel-profile: %-60s %8ld %12.1f %10.1f\n", rows[j].key, rows[j].launches, rows[j].us,
                rows[j].us / (double)rows[j].launches);
    }
    fprintf(stderr, "kernel-profile: total %.1f us\n", total);
}

__attribute__((constructor)) static void install_report(void)
{
    atexit(report);
}

/* The next definition of `name` (the OpenCL loader's). */
static void *next_symbol(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

typedef cl_command_queue (*create_queue_props_fn)(cl_context, cl_device_id, const cl_queue_properties *, cl_int *);
typedef cl_command_queue (*create_queue_fn)(cl_context, cl_device_id, cl_command_queue_properties, cl_int *);
typedef cl_int (*enqueue_fn)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *,
                             cl_uint, const cl_event *, cl_event *);
typedef cl_int (*finish_fn)(cl_command_queue);

cl_command_queue clCreateCommandQueueWithProperties(cl_context context, cl_device_id device,
                                                    const cl_queue_properties *props, cl_int *err)
{
    create_queue_props_fn real = (create_queue_props_fn)next_symbol("clCreateCommandQueueWithProperties");
    cl_queue_properties with[64];
    int n = 0, had = 0;
    for (; props && props[n] && n < 60; n += 2) {
        with[n] = props[n];
        with[n + 1] = props[n + 1];
        if (props[n] == CL_QUEUE_PROPERTIES) {
            with[n + 1] |= CL_QUEUE_PROFILING_ENABLE;
            had = 1;
        }
    }
    if (!had) {
        with[n++] = CL_QUEUE_PROPERTIES;
        with[n++] = CL_QUEUE_PROFILING_ENABLE;
    }
    with[n] = 0;
    return real(context, device, with, err);
}

cl_command_queue clCreateCommandQueue(cl_context context, cl_device_id device, cl_command_queue_properties props,
                                      cl_int *err)
{
    create_queue_fn real = (create_queue_fn)next_symbol("clCreateCommandQueue");
    return real(context, device, props | CL_QUEUE_PROFILING_ENABLE, err);
}

cl_int clEnqueueNDRangeKernel(cl_command_queue queue, cl_kernel kernel, cl_uint dims, const size_t *offset,
                              const size_t *global, const size_t *local, cl_uint n_wait, const cl_event *wait,
                              cl_event *event)
{
    enqueue_fn real = (enqueue_fn)next_symbol("clEnqueueNDRangeKernel");
    cl_event mine;
    const cl_int rc = real(queue, kernel, dims, offset, global, local, n_wait, wait, &mine);
    if (rc != CL_SUCCESS)
        return rc;
    if (event) {
        *event = mine;
        clRetainEvent(mine);
    }
    if (n_pending == MAX_PENDING)
        collect();
    char name[96] = "?";
    clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
    snprintf(pending_key[n_pending], KEY_LEN, "%s [%zu,%zu,%zu]", name, global[0], dims > 1 ? global[1] : 1,
             dims > 2 ? global[2] : 1);
    pending[n_pending++] = mine;
    return rc;
}

cl_int clFinish(cl_command_queue queue)
{
    finish_fn real = (finish_fn)next_symbol("clFinish");
    const cl_int rc = real(queue);
    collect();
    return rc;
}

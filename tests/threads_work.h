/* SPDX-License-Identifier: Apache-2.0 */
/* Several threads on flashcl, as scenarios that both test_threads.c (Criterion) and
 * threads_alone.c (a plain program, for ThreadSanitizer, which Criterion's runner does not
 * survive) run. Each thread runs a forward, a kv-cache append and a decode over that cache, a
 * projection and host copies on its own tensors, three rounds, plus a rejected call whose message
 * must be its own. */
#ifndef FLASHCL_TEST_THREADS_WORK_H
#define FLASHCL_TEST_THREADS_WORK_H

typedef enum threads_scenario {
    THREADS_ONE_CONTEXT,  /* 4 threads on one context */
    THREADS_OWN_CONTEXTS, /* 4 threads with a context each */
    THREADS_CACHED_LOADS  /* 4 threads with a context each, every program from the disk cache */
} threads_scenario;

/*
 * Runs scenario s on FLASHCL_DEVICE: NULL when every thread got, bit for bit, what its work
 * gives run alone (and with THREADS_CACHED_LOADS compiled nothing), else a sentence saying what
 * went wrong (static storage). THREADS_CACHED_LOADS first sets FLASHCL_CACHE_DIR to a new folder
 * (removed at the end), FLASHCL_CACHE_PROGRAMS=1 and POCL_KERNEL_CACHE=0: run it before any
 * other OpenCL call of the process.
 */
const char *threads_scenario_run(threads_scenario s);

#endif

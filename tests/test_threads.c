/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Threads on one context (its calls serialised by the context's lock), one context per thread,
 * and contexts loading the same cached program binaries at once (threads_work.c). The probe of
 * issue 28 saw PoCL's "PTHREAD ERROR" and wrong results from threads sharing a context, and
 * PoCL 3.1 abort when threads loaded cached binaries at once.
 */
#include "threads_work.h"

#include <criterion/criterion.h>

Test(threads, one_context)
{
    const char *why = threads_scenario_run(THREADS_ONE_CONTEXT);
    cr_assert(why == NULL, "%s", why);
}

Test(threads, one_context_each)
{
    const char *why = threads_scenario_run(THREADS_OWN_CONTEXTS);
    cr_assert(why == NULL, "%s", why);
}

Test(threads, cached_program_loads)
{
    const char *why = threads_scenario_run(THREADS_CACHED_LOADS);
    cr_assert(why == NULL, "%s", why);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* The scenarios of threads_work.h without Criterion (whose runner does not start under
 * ThreadSanitizer): `threads_alone one|each|cached` runs one, prints what went wrong and exits
 * non-zero on a failure. scripts/test-abuse runs it from a ThreadSanitizer build. */
#include "threads_work.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    static const char *const names[3] = {"one", "each", "cached"};
    for (int s = 0; s < 3; s++)
        if (argc == 2 && strcmp(argv[1], names[s]) == 0) {
            const char *why = threads_scenario_run((threads_scenario)s);
            printf("threads_alone %s: %s\n", names[s], why ? why : "ok");
            return why != NULL;
        }
    fprintf(stderr, "usage: threads_alone one|each|cached\n");
    return 2;
}

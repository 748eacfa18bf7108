/* SPDX-License-Identifier: Apache-2.0 */
/* Drives fuzz_validation.c's LLVMFuzzerTestOneInput without libFuzzer (compilers without
 * -fsanitize=fuzzer): `fuzz_loop RUNS SEED` feeds RUNS inputs of 1 to 64 bytes from a
 * splitmix64 stream seeded with SEED; a violation aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fuzz_loop RUNS SEED\n");
        return 2;
    }
    const long runs = strtol(argv[1], NULL, 10);
    uint64_t state = strtoull(argv[2], NULL, 10);
    uint8_t input[64];
    for (long i = 0; i < runs; i++) {
        const size_t n = 1 + splitmix64(&state) % sizeof input;
        for (size_t k = 0; k < n; k++)
            input[k] = (uint8_t)splitmix64(&state);
        LLVMFuzzerTestOneInput(input, n);
    }
    printf("fuzz_loop: %ld inputs, no violation\n", runs);
    return 0;
}

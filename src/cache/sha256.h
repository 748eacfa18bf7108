/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SHA-256 (FIPS 180-4), incremental. Internal to flashcl; not part of the public API.
 */
#ifndef FLASHCL_SHA256_H
#define FLASHCL_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct fcl_sha256 {
    uint32_t h[8];        /* chaining state */
    uint64_t total;       /* bytes hashed so far */
    uint8_t block[64];    /* pending partial block */
    size_t fill;          /* bytes in block (0..63) */
} fcl_sha256;

void fcl_sha256_init(fcl_sha256 *s);
void fcl_sha256_update(fcl_sha256 *s, const void *data, size_t len);
/* Writes the digest to out; the state must be re-initialised before reuse. */
void fcl_sha256_final(fcl_sha256 *s, uint8_t out[32]);

/* Hashes a length-prefixed field: the string's length as 8 bytes little-endian, then its
 * bytes (no terminator). NULL hashes like "". Concatenated fields cannot be confused. */
void fcl_sha256_update_field(fcl_sha256 *s, const char *str);

/* One-shot convenience: out = SHA-256(data[0..len)). */
void fcl_sha256_digest(const void *data, size_t len, uint8_t out[32]);

#endif

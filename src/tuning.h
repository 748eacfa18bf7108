/* Per-device tile sizes and work-group shapes (vendor defaults, overridable by environment). */
#ifndef FLASHCL_TUNING_H
#define FLASHCL_TUNING_H

#include "internal.h"

typedef struct fcl_forward_tiles {
    int block_m; /* query rows per work-group (= work-group size) */
    int block_n; /* keys per local-memory tile */
    int rows;    /* query rows per work-item; the work-group has block_m / rows items */
} fcl_forward_tiles;

/* Tiles for the attention forward at padded head dim `head_dim_pad` on ctx's device: the
 * table's entry for the device, then FLASHCL_FORWARD_TILES="M,N,R" if set, then clamped so the
 * K/V tiles fit in half the device's local memory and M / R fits its work-group limit. */
fcl_forward_tiles fcl_tune_forward(fcl_context ctx, int head_dim_pad);

#endif

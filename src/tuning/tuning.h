/* SPDX-License-Identifier: Apache-2.0 */
/* Per-device tile sizes, work-group shapes and code-shape knobs (vendor defaults, overridable
 * by environment), and the limits of devices that have them. */
#ifndef FLASHCL_TUNING_H
#define FLASHCL_TUNING_H

#include "core/internal.h"

/* The head dim the kernels are specialised for: D rounded up to 16, then to multiples of 32; any
 * D above FCL_MAX_HEAD_DIM (no kernel takes one; the path getters may ask) gives
 * FCL_MAX_HEAD_DIM + 32, so no tile arithmetic on it overflows. */
int fcl_pad_head_dim(int64_t D);

typedef struct fcl_forward_tiles {
    int block_m;      /* query rows per work-group */
    int block_n;      /* keys per local-memory tile */
    int rows;         /* query rows per work-item; the work-group has block_m / rows items */
} fcl_forward_tiles;

/* Tiles for the attention forward at padded head dim `head_dim_pad` on ctx's device: the
 * table's entry for the device, then FLASHCL_FORWARD_TILES="M,N,R" if set, then clamped so
 * the local array fits in half the device's local memory and M / R fits its work-group limit. */
fcl_forward_tiles fcl_tune_forward(fcl_context ctx, int head_dim_pad);

typedef struct fcl_cpu_tiles {
    int simd;         /* floats per vector: 4, 8 or 16 (in the table, 0: the device's native float width) */
    int rv;           /* row vectors per work-item: simd * rv query rows */
    int bn;           /* keys per tile */
    int db;           /* head dims per P V step: 1, 2, 4, 8 or 16 */
    /* The dense forward's tiles where it reads F32 K/V in place (rows H x D apart) and the
     * sequences fill direct_rv vectors: the table's, with 16-float vectors (32 registers) only; 0
     * (no tuned entry or FLASHCL_CPU_TILES sets them): rv, bn, db everywhere */
    int direct_rv, direct_bn, direct_db;
} fcl_cpu_tiles;

/* The CPU kernels' vector width: FLASHCL_CPU_SIMD (4, 8 or 16) where set, else the device's native
 * float vector width as 16, 8 or 4 floats. */
int fcl_device_simd_floats(fcl_context ctx);

/* Tiles of the CPU forward (cl/portable/attention_forward_cpu.cl) at padded head dim
 * `head_dim_pad`: the device's table entry (CPUs), then a tuned entry ("forward_cpu": simd, rv,
 * bn, db), then FLASHCL_CPU_TILES="S,R,N,D"; simd 0 becomes the device's native float vector width
 * (16, 8 or 4). All zero where the kernel does not run: devices whose entry has no CPU tiles
 * (GPUs; with FLASHCL_FORWARD_PATH=cpu the CPUs' tiles instead) and devices with a loop cap. */
fcl_cpu_tiles fcl_tune_forward_cpu(fcl_context ctx, int head_dim_pad);

typedef struct fcl_blocked_tiles {
    int block_m;      /* query rows per work-group */
    int block_n;      /* keys per tile */
    int wm;           /* rows per work-item; block_m / wm work-items along the rows */
    int wn;           /* keys per work-item; block_n / wn work-items along the keys */
    int dk;           /* head dims per local slice of Q and K (a multiple of 4) */
    int nk;           /* keys per local slice of V */
    int max_regs;     /* NVIDIA: registers per work-item (-cl-nv-maxrregcount); 0: the compiler's choice */
    int vw;           /* local-memory vector width (4, 2 or 1), dividing wm, wn and the dims per item */
    int v_buffers;    /* local buffers of V slices: 2 (one barrier per slice, nk x head dims more local
                       * memory) or 1 (two barriers per slice) */
} fcl_blocked_tiles;

/* Tiles of the register-blocked GPU forward (cl/portable/attention_forward_blocked.cl) at padded head dim
 * `head_dim_pad`: the device's table entry, then a tuned entry ("forward_blocked": block_m,
 * block_n, wm, wn), then FLASHCL_BLOCKED_TILES="M,N,WM,WN[,DK[,NK[,R[,VB]]]]" if valid; then made
 * to fit: wn doubled until block_n / wn divides head_dim_pad, dk and nk to divisors, one V buffer
 * where two do not fit, block_m halved until the work-group and its local arrays fit the device.
 * block_m 0 where the table has no such kernel for the device (CPUs, devices with a loop cap). */
fcl_blocked_tiles fcl_tune_forward_blocked(fcl_context ctx, int head_dim_pad);

/* Bytes of the blocked forward's local arrays with tiles t at head dim `head_dim_pad`. */
uint64_t fcl_blocked_local_bytes(const fcl_blocked_tiles *t, int head_dim_pad);

typedef struct fcl_mma_tiles {
    int block_m;      /* query rows per work-group (multiple of 16 * m_tiles); 0: no tensor-core path */
    int block_n;      /* keys per local-memory tile (multiple of 16) */
    int m_tiles;      /* 16-row mma tiles per warp; the work-group has block_m / (16 m_tiles) warps */
    int max_regs;     /* registers per work-item the compiler may use (-cl-nv-maxrregcount); 0: its choice */
    int q_local;      /* k steps (16 head-dim columns) of the Q fragments held in local memory, not registers */
} fcl_mma_tiles;

/* Tiles of the NVIDIA tensor-core forward (cl/nvidia/attention_forward_mma.cl) at padded head dim
 * `head_dim_pad` for sequences of `keys_per_seq` keys (0 for varlen and packed: short), `packed`
 * for the packed form: the device's table entry or tuned entry, its tiles of more than 64 keys
 * cut to 64 where a sequence has fewer than 2 of them, and in the packed form at head_dim_pad <=
 * 32 64-row blocks of one m tile in place of two m tiles; or FLASHCL_MMA_TILES="M,N,T[,R[,Q]]" if
 * set, as given. Then N halved until two stages of K and V tiles fit the local memory, then Q
 * lowered (to at most head_dim_pad / 16) until its Q fragments fit beside them. block_m 0 where
 * the table has no such path. */
fcl_mma_tiles fcl_tune_forward_mma(fcl_context ctx, int head_dim_pad, int64_t keys_per_seq, int packed);

typedef struct fcl_wgmma_tiles {
    int block_n;      /* keys per local-memory tile (32, 64 or 128); 0: no wgmma path at this head dim */
    int stages;       /* K and V tiles in flight per work-group (1 or 2) */
    int max_regs;     /* registers per work-item the compiler may use (-cl-nv-maxrregcount); 0: its choice */
    int overlap;      /* 1: the next tile's S = Q K^T is issued behind this tile's P V (OVERLAP) */
    int q_regs;       /* 1: Q's fragments in registers, S = Q K^T with A from registers (Q_REGS) */
    int kernel_dim;   /* the kernel's HEAD_DIM_PAD: 64, 128, 192 or 256 (padded head dims 96, 160 and
                       * 224 run the next kernel up on zeros past the head dim) */
} fcl_wgmma_tiles;

/* Tiles of the Hopper wgmma forward (cl/nvidia/attention_forward_wgmma.cl) at padded head dim
 * `head_dim_pad` (64; 96 and 128 on the D 128 kernel; 160 and 192 on the D 192 one; 224 and 256
 * on the D 256 one; block_n 0 on devices other than NVIDIA compute capability 9.0) with or
 * without a key mask: the defaults (tuning.c), then a tuned entry ("forward_wgmma", at
 * head_dim_pad), then FLASHCL_WGMMA_TILES="N,S[,R[,O[,Q]]]" if valid; then stages, then N
 * lowered (to 64 up to D 128, to 32 past it) until Q (unless in registers), the stages and the
 * mask values fit the local memory; block_n 0 when nothing fits. */
fcl_wgmma_tiles fcl_tune_forward_wgmma(fcl_context ctx, int head_dim_pad, int has_mask);

typedef struct fcl_backward_tiles {
    int block_m;      /* query rows per tile; the dQ kernel's work-group size */
    int block_n;      /* keys per tile; the dK/dV kernel's work-group size */
} fcl_backward_tiles;

/* Tiles for the attention backward at padded head dim `head_dim_pad`: the device's table
 * entry, then FLASHCL_BACKWARD_TILES="M,N" if set, then each halved until its kernel's local
 * arrays (about 2 * M or 2 * N rows of head_dim_pad floats) fit the local memory and it fits
 * the work-group limit. */
fcl_backward_tiles fcl_tune_backward(fcl_context ctx, int head_dim_pad);

typedef struct fcl_backward_blocked_tiles {
    int block_a;      /* the work-group's own rows: keys of the dK/dV kernel, query rows of the dQ kernel */
    int block_b;      /* rows of the tile it walks: query rows (dK/dV), keys (dQ) */
    int wa, wb;       /* own rows and tile rows per work-item: (block_a / wa) x (block_b / wb) work-items */
    int dk;           /* head dims per local slice of the products (a multiple of 4) */
    int nk;           /* tile rows per local slice of the rank updates */
    int vw;           /* local-memory vector width (4, 2 or 1), dividing wa, wb and the dims per item */
} fcl_backward_blocked_tiles;

/* Tiles of the register-blocked GPU backward (cl/portable/attention_backward_blocked.cl) at
 * padded head dim `head_dim_pad`: the device's table entry (with FLASHCL_BACKWARD_PATH=blocked
 * any GPU's where the device has none), then a tuned entry ("backward_blocked": block_a, block_b,
 * wa, wb), then FLASHCL_BACKWARD_BLOCKED_TILES="A,B,WA,WB[,DK[,NK]]" if valid; then made to fit:
 * wb doubled until block_b / wb divides head_dim_pad, dk and nk to divisors, block_a halved until
 * the work-group and its local arrays fit the device. block_a 0 where the kernel does not run
 * (no table entry: CPUs; devices with a loop cap). */
fcl_backward_blocked_tiles fcl_tune_backward_blocked(fcl_context ctx, int head_dim_pad);

/* Bytes of the blocked backward's local arrays with tiles t at head dim `head_dim_pad`. */
uint64_t fcl_backward_blocked_local_bytes(const fcl_backward_blocked_tiles *t, int head_dim_pad);

typedef struct fcl_backward_mma_tiles {
    int dkdv_block_n; /* keys per dK/dV work-group (16 per warp); 0: no tensor-core backward */
    int dkdv_block_m; /* query rows per local tile of the dK/dV kernel */
    int dq_block_m;   /* query rows per dQ work-group (16 per warp) */
    int dq_block_n;   /* keys per local tile of the dQ kernel */
    int kv_local;     /* k steps whose K and V fragments the dK/dV kernel keeps in local memory */
    int dkdv_cols;    /* dK/dV columns per work-group (head_dim_pad / cols work-groups per key block,
                       * each recomputing S and dP) */
    int dq_cols;      /* dQ columns per work-group (likewise per query row block) */
} fcl_backward_mma_tiles;

/* The widest equal split of head_dim_pad (a multiple of 16) columns into multiples of 16 of at
 * most `most` columns (below 16: 16): head_dim_pad / s for the fewest s that gives one. */
int fcl_fit_columns(int head_dim_pad, int most);

/* Tiles of the NVIDIA tensor-core backward (cl/nvidia/attention_backward_mma.cl) at padded head dim
 * `head_dim_pad`: the device's table entry (NVIDIA compute capability >= 8.0 only; past 128 the
 * output columns may split over work-groups, since a warp's K, V, dK and dV live in registers),
 * then a tuned entry, then FLASHCL_BACKWARD_MMA_TILES="KN,KM,QM,QN[,KV[,KC,QC]]" if set (tiles
 * multiples of 16 in [16, 256], KV in [0, 16], KC and QC the most dK/dV and dQ columns per
 * work-group, multiples of 16 in [16, 256]); each local tile halved until its two stages fit the
 * local memory, then KV lowered to the head dim's k steps and to what fits beside the dK/dV
 * kernel's stages, KC and QC to the widest equal split of head_dim_pad into multiples of 16
 * within them; dkdv_block_n 0 when there is no such path or a work-group would exceed the
 * device's limit. With `stored_ds` the dQ kernel's ring holds K tiles alone (dS stored by the
 * dK/dV kernel), so its key tiles are lowered against that. With `packed` (the packed-QKV form)
 * up to padded D 128 the table's or tuned tiles become 32-key dK/dV blocks (64-row query tiles at
 * padded D 64, else 32-row), 32-row dQ blocks and 32-key dQ tiles. */
fcl_backward_mma_tiles fcl_tune_backward_mma(fcl_context ctx, int head_dim_pad, int stored_ds, int packed);

typedef struct fcl_decode_tiles {
    int block_n;      /* keys per work-group and batch (teams x keys per team) */
    int rows;         /* most query rows (query heads x positions of one KV head) per work-group */
    int wg;           /* most work-items per work-group */
    int waves;        /* work-groups per compute unit in one round (as many as run at once there),
                       * which the split count fills */
    int split_min;    /* fewest keys per split (a split's fixed costs: Q, team merge, state) */
    int max_regs;     /* NVIDIA: registers per work-item of the partial kernel (-cl-nv-maxrregcount);
                       * 0: the compiler's choice */
    int stages;       /* NVIDIA (compute capability >= 8), team-shuffle form with 16-byte aligned
                       * rows: key batches in flight through a cp.async ring in local memory (2 to
                       * 4; fewer while the ring does not fit); 0: K and V read into registers */
    int mma_warps;    /* NVIDIA (compute capability >= 8): warps per work-group of the tensor-core
                       * form (cl/nvidia/attention_decode_mma.cl: 16 keys per warp and step, 16 query rows
                       * per work-group; `stages` its ring, lowered to fit); 0: no such form */
    int key_lanes;    /* > 0: the three-phase form (cl/portable/attention_decode_keys.cl) with this
                       * many work-items per key in its K phase (lowered to a power of two dividing
                       * the team; its batch is then wg / key_lanes keys, block_n unused), where
                       * no cp.async ring or tensor-core form runs; 0: the team forms of
                       * decode_partial */
    int k_ahead;      /* 1: the three-phase form reads K one batch ahead (K_AHEAD) */
} fcl_decode_tiles;

typedef struct fcl_decode_shape {
    int team;         /* work-items per team (a team takes one key at a time; each item owns
                       * head_dim_pad / team dims): the largest divisor of head_dim_pad / 8 <= wg */
    int teams;        /* teams per work-group: the largest power of two with team * teams <= wg */
    int keys;         /* keys per team and batch: block_n / teams, at least 1 */
} fcl_decode_shape;

/* Tiles for decode at padded head dim `head_dim_pad` of a `dtype` cache with `rows` query rows per
 * KV head: the device's table entry (its F32 tiles for F32 where it has them), then a tuned entry
 * ("decode", for every dtype), then FLASHCL_DECODE_TILES="N,R,W[,G[,S[,M[,A[,T[,K[,P]]]]]]]"
 * (block_n, rows, wg, waves, split_min, max_regs, stages, mma_warps, key_lanes, k_ahead; the
 * values left out keep the entry's or the table's), each only when fcl_tuned_values_valid("decode")
 * accepts it; then the device's limits: stages and mma_warps 0 without cp.async (NVIDIA compute
 * capability < 8), rows to the next power of two >= min(`rows`, R) (INT_MAX: R's), wg to the device's
 * work-group limit, then N and R halved until the local arrays fit the local memory; block_n
 * and wg as their shape gives them (teams * keys, team * teams). */
fcl_decode_tiles fcl_tune_decode(fcl_context ctx, int head_dim_pad, fcl_dtype dtype, int rows);

/* The key lanes of the three-phase decode form for tiles t (already normalised) at padded head
 * dim `head_dim_pad`: the largest power of two <= t->key_lanes dividing the team (and so
 * head_dim_pad / 8); 0 when t has none or the work-group is one work-item. */
int fcl_decode_key_lanes(const fcl_decode_tiles *t, int head_dim_pad);

/* The work-group shape of tiles t at padded head dim `head_dim_pad`. */
fcl_decode_shape fcl_decode_shape_of(const fcl_decode_tiles *t, int head_dim_pad);

/* Floats of the decode kernel's local arrays (the larger of the team and three-phase forms' when
 * t has key lanes). */
int fcl_decode_local_floats(const fcl_decode_tiles *t, int head_dim_pad);

/* Floats of the forward kernel's shared local array: the K (transposed, padded) and V tiles,
 * reused by the epilogue for the block's output rows. */
int fcl_forward_smem_floats(const fcl_forward_tiles *t, int head_dim_pad);

/* The most loop iterations one work-item may run on ctx's device, 0 when unlimited. Mesa's
 * llvmpipe (Rusticl, Clover; seen with Mesa 22.3) silently ends every loop once a work-item
 * has run 65535 iterations in total, so ops there split their work into launches that stay
 * under the cap. FLASHCL_LOOP_LIMIT=N imposes a cap of N on any device (used by the tests to
 * run the chunked path everywhere). */
long fcl_device_loop_limit(fcl_context ctx);

/* Tiles one work-item may run per launch under the device's loop cap, given the loop iterations
 * of a tile and outside the tile loop (counted generously; 3/4 of the cap is used): 0 when the
 * device has no cap, -1 when not even one tile fits. */
long fcl_tiles_under_loop_cap(fcl_context ctx, long per_tile, long fixed);

/* FCL_ERR_UNSUPPORTED: "<op>: one <what> tile needs N loop iterations, more than ... allows". */
fcl_status fcl_loop_cap_error(fcl_context ctx, const char *op, const char *what, long per_tile, long fixed);

/* ---- projection GEMM (cl/portable/linear.cl, tiled variant) ---- */

typedef struct fcl_gemm_tiles {
    int tile_m;       /* rows of C per work-group (TM) */
    int tile_n;       /* columns of C per work-group (TN) */
    int tile_k;       /* depth of the local-memory slices of A and B (TK) */
    int wpt_m;        /* rows per work-item (WM); tile_m / wpt_m work-items along m */
    int wpt_n;        /* columns per work-item (WN); tile_n / wpt_n work-items along n */
    int vw;           /* local-memory read width (VW: 1, 2 or 4), divides wpt_m and wpt_n */
} fcl_gemm_tiles;

/* Whether the projections' portable GEMM is the tiled kernel on ctx's device (GPUs and
 * loop-capped devices); else (CPUs) the one-work-item kernel, which has no tiles. */
int fcl_gemm_tiled(fcl_context ctx);

/* Tiles for the tiled projection GEMM on ctx's device: the GEMM table's entry for the device,
 * then a tuned entry ("gemm": TM, TN, TK, WM, WN, with VW 4 before the clamps below),
 * then FLASHCL_GEMM_TILES="TM,TN,TK,WM,WN[,VW]" if set and valid (WM divides TM, WN divides
 * TN), then clamped: vw to 4, 2 or 1 dividing wpt_m and wpt_n; the work-group
 * (tile_m / wpt_m) * (tile_n / wpt_n) to the device's limit; the local tiles
 * (fcl_gemm_local_floats) to the local memory, halving tile_k first. */
fcl_gemm_tiles fcl_tune_gemm(fcl_context ctx);

/* Floats of the tiled GEMM's local arrays: two buffers of TK rows of TM + VW and of TN + VW. */
int fcl_gemm_local_floats(const fcl_gemm_tiles *t);

/* ---- projection GEMM on NVIDIA tensor cores (cl/nvidia/linear_mma.cl) ---- */

typedef struct fcl_gemm_mma_tiles {
    int tile_m;       /* rows of C per work-group (a multiple of 16 warps_m); 0: no tensor-core GEMM */
    int tile_n;       /* columns of C per work-group (a multiple of 16 warps_n) */
    int tile_k;       /* depth of a K slice in local memory (a multiple of 16) */
    int warps_m;      /* warps along m and n: the work-group has warps_m * warps_n warps */
    int warps_n;
    int stages;       /* K slices in the local-memory ring (2 to 4) */
    int max_regs;     /* registers per work-item the compiler may use (-cl-nv-maxrregcount); 0: its choice */
} fcl_gemm_mma_tiles;

/* Tiles of the tensor-core GEMM on ctx's device, with `scales` (I8 weights scaled along K: a
 * float per slice row in each stage) or without: the GEMM table's entry (tile_m 0 where it has
 * none: devices other than NVIDIA GPUs), then FLASHCL_GEMM_MMA_TILES="TM,TN,TK,WM,WN[,S[,R]]" if
 * valid (TM and TN multiples of 16 WM and 16 WN up to 256, TK a multiple of 16 up to 128, WM * WN
 * up to 16 warps, S 2 to 4, R 0 to 255; values left out keep the entry's); then stages, then
 * tile_k (by 16) lowered until the ring fits the local memory; tile_m 0 when it does not, or the
 * work-group exceeds the device's limit. */
fcl_gemm_mma_tiles fcl_tune_gemm_mma(fcl_context ctx, int scales);

/* ---- projection GEMM on Hopper's warpgroup tensor cores (cl/nvidia/linear_wgmma.cl) ---- */

typedef struct fcl_gemm_wgmma_tiles {
    int tile_m;       /* rows of C per work-group: 64 or 128 per warpgroup; 0: no wgmma GEMM */
    int tile_n;       /* columns of C per work-group: 64, 128 or 256 */
    int tile_k;       /* depth of a K slice in local memory: 16, 32 or 64 */
    int warpgroups;   /* warpgroups per work-group (1 or 2), stacked along m */
    int stages;       /* K slices in the local-memory ring (2 to 4) */
    int lag;          /* 1: a slice's products are issued before the previous slice's complete */
    int max_regs;     /* registers per work-item the compiler may use (-cl-nv-maxrregcount); 0: its choice */
    int dequant_rows[2]; /* forward GEMMs of I8 weights with F16 [0] or BF16 [1] activations and at least
                          * this many rows convert the weights to the activations' dtype first and run
                          * the 16-bit GEMM; 0: never */
} fcl_gemm_wgmma_tiles;

/* The wgmma GEMM's forms, by what its local memory holds: both operands' 16-bit stages; I8 B
 * (the input gradients' weights) as two converted tiles and a raw ring one slice shorter than the
 * stages, beside A's stages; I8 A (the forward's weights, converted in registers) as raw stages of
 * a byte per value beside B's. */
enum { FCL_WGMMA_W16, FCL_WGMMA_I8_TILES, FCL_WGMMA_I8_REGS };

/* Tiles of the wgmma GEMM of `form` on ctx's device: the GEMM table's entry (tile_m 0 off NVIDIA
 * compute capability 9.0), then FLASHCL_GEMM_WGMMA_TILES="TM,TN,TK,G,S,L[,R]" if valid (TM 64 G or
 * 128 G, TN 64, 128 or 256, TK 16, 32 or 64, G 1 or 2, S 2 to 4, L 0 or 1 below S - 1, R 0 to 255);
 * lag 0 with I8, and the I8 A form takes the entry's stages plus one (not the variable's); then
 * stages (not below L + 2, nor 3 for I8 A) lowered until the tiles fit the local memory; tile_m
 * 0 when they do not. FLASHCL_GEMM_DEQUANT_ROWS=N (N >= 0) sets both dequant_rows. */
fcl_gemm_wgmma_tiles fcl_tune_gemm_wgmma(fcl_context ctx, int form);

/* Bytes of the tensor-core GEMM's local arrays with tiles t, for either layout of each operand
 * (a slice stored as rows along its unit-stride dimension, padded by 8 halves), plus the scales. */
uint64_t fcl_gemm_mma_local_bytes(const fcl_gemm_mma_tiles *t, int scales);

#endif

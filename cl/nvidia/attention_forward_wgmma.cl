/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attention forward on Hopper's warpgroup tensor cores (compute capability 9.0, wgmma through
 * sm_90a: wgmma_nv.cl): the same online softmax (forward_softmax_nv.cl), arguments, layouts and
 * key-tile grid as attention_forward_mma.cl, with S = Q K^T and O += P V as wgmma products of a
 * whole warpgroup (F16 or BF16 inputs, FP32 accumulation). F16 and BF16 storage only.
 *
 * A work-group is one warpgroup (128 work-items) and computes 64 query rows of one (batch,
 * head): warp w owns rows 16 w .. 16 w + 15, keeping the tile's scores and the output
 * accumulators in registers. Q (64 rows, zeros past sq), and the K and V tiles of BLOCK_N keys,
 * sit in local memory as swizzled atoms (mma_nv.cl: swizzled_offset), which wgmma reads by
 * descriptor: S = Q K^T with both operands there, O += P V with P from registers (the scores'
 * accumulators are its A fragments) and V there as the transposed B operand. With Q_REGS, Q
 * is read once into registers as A fragments (S = Q K^T with A from registers, as past head dim
 * 128 Q and the tiles would not fit local memory together), its local copy staged in the K and
 * V stages' space before their first copies. K and V tiles are
 * a ring of STAGES stages each, refilled separately: tile t + STAGES's K copy is issued as soon
 * as the products of S are done with tile t's K (it lands during the softmax and P V), its V copy
 * once P V is done with tile t's V. With ASYNC_COPY (rows 16-byte aligned) by cp.async,
 * otherwise by plain loads and stores. The work-group's local memory is the whole 48 KB at
 * D 128 with 64-key tiles and one stage, so several work-groups share a multiprocessor and hide
 * each other's copies.
 *
 * Keys of a tile that a row cannot see contribute exactly nothing, and masked-out keys' V is
 * never read (zeros instead). No key chunking: the host takes this path only on devices without
 * a loop cap, with key_lo .. key_hi the whole key range.
 *
 * Specialisation (-D): FCL_DTYPE 1 or 2; HEAD_DIM_PAD 64, 128, 192 or 256; QK_DIM (the padded
 * head dim, a multiple of 32 up to HEAD_DIM_PAD: the dims S = Q K^T runs over; a padded head dim
 * of 96 runs the D 128 kernel, 160 the D 192 one, 224 the D 256 one, whose dims past the head
 * dim are zeros in Q, K and V, and O's columns there are not stored; its copies then zero them:
 * PADDED_COPY, mma_nv.cl); Q_REGS (0 or 1, above);
 * BLOCK_M 64; BLOCK_N 32, 64 or 128;
 * M_TILES 1; STAGES 1 or 2; OVERLAP (1: tile t + 1's S = Q K^T is issued right behind tile t's
 * P V, so that the tensor cores run both back to back; 0: once P V has completed);
 * SWIZZLED_TILES 1; ASYNC_COPY; PAIRS (O rows 4-byte aligned, head_dim even: one 32-bit store
 * per pair); HAS_SOFTCAP, HAS_MASK, HAS_ALIBI; LAYOUT.
 */

#define WG_SIZE 128
#define Q_ATOM (64 * 64)       /* halves of one 64-column atom of Q */
#define KV_ATOM (BLOCK_N * 64) /* halves of one 64-column atom of a K or V tile */

/* O += P V runs over the output columns in products of PV_N columns (the widest taken, 128) and
 * one of PV_TAIL past them (none at head dims 64 and 128). */
#if HEAD_DIM_PAD <= 128
#define PV_N HEAD_DIM_PAD
#define PV_TAIL 0
#elif HEAD_DIM_PAD == 192
#define PV_N 128
#define PV_TAIL 64
#else
#define PV_N 128
#define PV_TAIL 128
#endif

/* The local array: Q's atoms, then K stages, then V stages; with Q_REGS the stages alone, Q's
 * staged copy in their space (KV_ROW0: the row where the stages start). */
#if Q_REGS
#define KV_ROW0 0
#define LOCAL_ROWS (64 > 2 * STAGES * BLOCK_N ? 64 : 2 * STAGES * BLOCK_N)
#else
#define KV_ROW0 64
#define LOCAL_ROWS (64 + 2 * STAGES * BLOCK_N)
#endif

/* cp.async groups are committed Q, K 0, V 0, K 1, V 1, ...: a tile's K (or V) copy has landed
 * once at most 2 STAGES - 1 newer groups are pending; Q once at most 2 STAGES are; with OVERLAP
 * the next tile's K, waited for before this tile's V refill, once at most 2 STAGES - 2 are. */
#if STAGES == 1
#define WAIT_TILE "cp.async.wait_group 1;"
#define WAIT_NEXT_K "cp.async.wait_group 0;"
#define WAIT_Q "cp.async.wait_group 2;"
#elif STAGES == 2
#define WAIT_TILE "cp.async.wait_group 3;"
#define WAIT_NEXT_K "cp.async.wait_group 2;"
#define WAIT_Q "cp.async.wait_group 4;"
#else
#error "STAGES must be 1 or 2"
#endif

/* Waits for this work-item's copies up to `wait` (WAIT_TILE, WAIT_Q), then for the whole group:
 * the tile is in local memory, visible to wgmma. */
#if ASYNC_COPY
#define TILE_LANDED(wait)                                                                              \
    do {                                                                                             \
        __asm__ __volatile__(wait ::: "memory");                                                     \
        fence_async_local();                                                                         \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                \
    } while (0)
#else
#define TILE_LANDED(wait)                                                                              \
    do {                                                                                             \
        fence_async_local();                                                                         \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                \
    } while (0)
#endif

/* Starts the copy of the K (V) tile of keys j0 .. into stage st; V rows of masked-out keys
 * become zeros, and their mask values go to MASK_STAGE(st) (issue_v_tile, mma_nv.cl). */
#define ISSUE_K(st, j0)                                                                                \
    load_rows(K_STAGE(st), KV_ATOM, BLOCK_N, HEAD_DIM_PAD, WG_SIZE, lid, Ku, kbase, k_ss, j0, g_lo, g_hi,    \
              head_dim, 0, mask, mrow, mask_ss)
#define ISSUE_V(st, j0)                                                                                \
    issue_v_tile(V_STAGE(st), MASK_STAGE(st), BLOCK_N, KV_ATOM, HEAD_DIM_PAD, WG_SIZE, lid, Vu, vbase, v_ss, j0,  \
                 g_lo, g_hi, head_dim, mask, mrow, mask_ss)

/* Once every warp's products are done with K stage st (holding tile `tile`): its refill with
 * tile tile + STAGES, whose copies are committed as one group (possibly empty). */
#define REFILL_K(st, tile)                                                                             \
    do {                                                                                             \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                \
        if ((tile) + STAGES < n_tiles)                                                               \
            ISSUE_K(st, j_first + ((tile) + STAGES) * BLOCK_N);                                      \
        commit_copies();                                                                             \
    } while (0)

/* Issues S = Q K^T (s: the 64 x BLOCK_N scores' accumulators) over the k steps of the first
 * QK_DIM dims (past them Q and K are zeros) as one wgmma group, from a K stage at k_addr and Q:
 * its fragments qa with Q_REGS, else its atoms at q_addr. */
#if Q_REGS
MMA_INLINE void tile_scores(float *s, uint (*qa)[4], uint k_addr)
{
    wgmma_fence();
    #pragma unroll
    for (int ks = 0; ks < QK_DIM / 16; ks++)
        WGMMA_RSK_N(BLOCK_N)(s, qa[ks], STEP_DESC(k_addr, KV_ATOM, ks), ks > 0);
    wgmma_commit();
}
#define Q_OPERAND qa
#else
MMA_INLINE void tile_scores(float *s, uint q_addr, uint k_addr)
{
    wgmma_fence();
    #pragma unroll
    for (int ks = 0; ks < QK_DIM / 16; ks++)
        WGMMA_SS_N(BLOCK_N)(s, STEP_DESC(q_addr, Q_ATOM, ks), STEP_DESC(k_addr, KV_ATOM, ks), ks > 0);
    wgmma_commit();
}
#define Q_OPERAND q_addr
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attention_forward(FORWARD_KERNEL_ARGS)
{
    /* every atom starts 1024-byte aligned */
    __local ushort tiles[LOCAL_ROWS * HEAD_DIM_PAD] __attribute__((aligned(1024)));
#define K_STAGE(st) (tiles + (KV_ROW0 + (st) * BLOCK_N) * HEAD_DIM_PAD)
#define V_STAGE(st) (tiles + (KV_ROW0 + (STAGES + (st)) * BLOCK_N) * HEAD_DIM_PAD)
#if HAS_MASK
    __local float Ms[STAGES][BLOCK_N];
#define MASK_STAGE(st) Ms[st]
#else
#define MASK_STAGE(st) 0
#endif
    NV_FORWARD_SETUP
    const int row0 = i0 + warp * 16 + g; /* this lane's rows: row0 and row0 + 8 */
    const int p0 = row0 + shift;         /* the absolute position of row0 */

    const long kbase = ko + b * k_sb + hk * k_sh;
    const long vbase = vo + b * v_sb + hk * v_sh;
    const long mrow = mo + b * mask_sb;
    const int j_first = FIRST_TILE(g_lo, g_hi, BLOCK_N);
    const int n_tiles = g_lo <= g_hi ? (g_hi - j_first) / BLOCK_N + 1 : 0;
    load_rows(tiles, Q_ATOM, 64, HEAD_DIM_PAD, WG_SIZE, lid, Qu, qo + b * q_sb + h * q_sh, q_ss, i0, 0, sq - 1,
              head_dim, 0, mask, 0, 0);
    commit_copies();
#if Q_REGS
    /* Q's A fragments (rows 16 warp + g (+ 8), columns 16 ks + 2 t (+ 8)), sign bits flipped for
     * negated queries, read before the stages' copies overwrite the staged Q */
    uint qa[QK_DIM / 16][4];
    TILE_LANDED("cp.async.wait_group 0;");
    #pragma unroll
    for (int ks = 0; ks < QK_DIM / 16; ks++)
        #pragma unroll
        for (int e = 0; e < 4; e++)
            qa[ks][e] = *(__local const uint *)(tiles + swizzled_offset(warp * 16 + g + 8 * (e & 1),
                                                                        ks * 16 + 2 * t + 8 * (e >> 1), Q_ATOM)) ^
                        q_sign;
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    for (int st = 0; st < STAGES; st++) {
        if (st < n_tiles)
            ISSUE_K(st, j_first + st * BLOCK_N);
        commit_copies();
        if (st < n_tiles)
            ISSUE_V(st, j_first + st * BLOCK_N);
        commit_copies();
    }
    if (!Q_REGS && q_sign) { /* negated queries (a uniform branch): every sign bit of Q flipped once it has landed */
#if ASYNC_COPY
        __asm__ __volatile__(WAIT_Q ::: "memory");
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int w = lid; w < 64 * HEAD_DIM_PAD / 8; w += WG_SIZE)
            ((__local uint4 *)tiles)[w] ^= (uint4)(q_sign);
    }

    float acc[1][NT_O][4];
    float m[1][2], l[1][2];
    int jlo[1][2], jhi[1][2];
    int lo_max, hi_min; /* the keys that all of this lane's rows see */
    init_rows(row0, g_lo, g_hi, shift, sq, sk, window_left, window_right, cu_q, cu_q_off, seq_ss, acc, m, l, jlo,
              jhi, &lo_max, &hi_min);

#if !Q_REGS
    const uint q_addr = local_address(tiles);
#endif
    float s[1][NT_S][4];
#if OVERLAP
    if (n_tiles > 0) { /* tile 0's scores; the loop issues tile t + 1's behind tile t's P V */
        TILE_LANDED(WAIT_TILE);
        tile_scores(&s[0][0][0], Q_OPERAND, local_address(K_STAGE(0)));
        wgmma_wait_all();
        REFILL_K(0, 0);
    }
#endif
    for (int tile = 0; tile < n_tiles; tile++) {
        const int j0 = j_first + tile * BLOCK_N, st = tile % STAGES;
#if !OVERLAP
        TILE_LANDED(WAIT_TILE); /* K of this tile (and Q) */
        tile_scores(&s[0][0][0], Q_OPERAND, local_address(K_STAGE(st)));
        wgmma_wait_all();
        REFILL_K(st, tile);
#elif HAS_MASK
        barrier(CLK_LOCAL_MEM_FENCE); /* the tile's mask values, stored with its V copy */
#endif

        /* Online softmax. Tiles that every row of the warp sees whole skip the visibility checks
         * (a warp-uniform branch). */
        float tmax[1][2];
        if (!HAS_MASK && warp_all(j0 >= lo_max && j0 + BLOCK_N - 1 <= hi_min))
            tile_logits(s, tmax, 0, j0, jlo, jhi, MASK_STAGE(st), t, qscale, softcap, slope, p0);
        else
            tile_logits(s, tmax, 1, j0, jlo, jhi, MASK_STAGE(st), t, qscale, softcap, slope, p0);
        float alpha[1][2];
        if (warp_any(softmax_tile(s, tmax, m, l, alpha, sfac)))
            rescale_rows(acc, alpha);
        uint pa[BLOCK_N / 16][4]; /* P's A fragments, all made before the fence */
        #pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; kk++)
            probs_fragment(pa[kk], s, 0, kk);

        /* O += P V over the tile's k steps (16 keys: 16 rows of 128 bytes in each atom) */
        TILE_LANDED(WAIT_TILE); /* V of this tile */
        const uint v_addr = local_address(V_STAGE(st));
        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; kk++) {
            WGMMA_RS_N(PV_N)(&acc[0][0][0], pa[kk], ROWS_STEP_DESC(v_addr, KV_ATOM, kk));
#if PV_TAIL
            WGMMA_RS_N(PV_TAIL)(&acc[0][PV_N / 8][0], pa[kk],
                                ROWS_STEP_DESC(v_addr + PV_N / 64 * 2 * KV_ATOM, KV_ATOM, kk));
#endif
        }
        wgmma_commit();
#if OVERLAP
        if (tile + 1 < n_tiles) { /* the next tile's scores, issued behind P V */
            TILE_LANDED(WAIT_NEXT_K);
            tile_scores(&s[0][0][0], Q_OPERAND, local_address(K_STAGE((tile + 1) % STAGES)));
        }
#endif
        wgmma_wait_all();
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp's products are done with this V stage: refill it */
        if (tile + STAGES < n_tiles)
            ISSUE_V(st, j0 + STAGES * BLOCK_N);
        commit_copies();
#if OVERLAP
        if (tile + 1 < n_tiles)
            REFILL_K((tile + 1) % STAGES, tile + 1);
#endif
    }

    store_output_rows(acc, m, l, row0, sq, head_dim, t, O, oo + b * o_sb + h * o_sh, o_ss, write_lse, LSE,
               lseo + b * lse_sb + h * lse_sh, lse_ss);
}

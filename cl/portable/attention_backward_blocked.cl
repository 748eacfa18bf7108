/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attention backward for GPUs, register-blocked: portable OpenCL C 1.2, no vendor code. The
 * same gradients, arguments and determinism as attention_backward.cl (which stays the kernel
 * of loop-capped devices: no chunking here), computed per tile as register-blocked GEMMs in
 * the style of the blocked forward:
 *
 *  attention_backward_dkdv  a work-group owns BLOCK_A keys of one KV head and their dK, dV
 *                           (BLOCK_A x head dims, in registers); per query head of the group
 *                           and tile of BLOCK_B query rows that can see its keys:
 *                             S^T = K Q^T and dP^T = V dO^T, both in one pass over the head
 *                             dims (K, Q, V, dO slices of DK dims in local memory);
 *                             P = exp(S - LSE), dS = P (dP - delta) in registers;
 *                             dV += P^T dO, then dK += dS^T Q: P (then dS) goes to local
 *                             memory and dO (then Q) streams through it in NK-row slices.
 *  attention_backward_dq    a work-group owns BLOCK_A query rows of one head and their dQ;
 *                           per tile of BLOCK_B keys it can see: S = Q K^T and dP = dO V^T in
 *                           one pass, dS in registers, dQ += dS K (K in NK-key slices).
 *
 * With DS_STORED the dQ kernel does not recompute S and dP (two of the seven products per
 * (row, key) pair): the dK/dV kernel writes dS to `scores` and the dQ kernel reads it back. A
 * launch pair covers the keys [item_lo, item_hi] (a whole number of dK/dV blocks from
 * item_lo, a multiple of BLOCK_A): dK/dV runs that range's key blocks, storing dS of every
 * (row, key) pair it visits as FP32 at scores_index (attention_backward_rows.cl), VW keys per
 * aligned vector; dQ adds that range's terms, starting from its FP32 accumulators in `state` when
 * load_state and saving them there when save_state (the last range stores dQ). dS is the value
 * the dQ kernel would have recomputed, and the terms are added in the same order (keys
 * ascending; the dQ tiles start at a multiple of VW, the keys before the first seen adding exact
 * zeros), so the gradients are bit-identical to the recomputing form whatever the ranges.
 *
 * The "A" side is the work-group's own block, the "B" side the tile it walks. Work-item (ty, tx)
 * of TY x TX holds WA x WB of a tile's scores (block rows ROW_OF(i, ty), columns COL_OF(c, tx))
 * and WA x OC accumulators (dims COL_OF(c, tx)). Every accumulator sums its terms in one fixed
 * order (query heads, then query rows; or keys, ascending): bit-identical across runs, no
 * atomics. Per (i, j): s = scale q.k, softcap and ALiBi as backward_score; a key that row i
 * cannot see, a dropped key and a row with LSE = -inf give P = dS = 0 exactly (selected, so
 * that a dropped key's K or V never reach an accumulator, whatever they hold).
 *
 * Specialisation (-D): FCL_DTYPE (common.cl); HEAD_DIM_PAD; BLOCK_A, BLOCK_B, WA, WB (TY =
 * BLOCK_A / WA, TX = BLOCK_B / WB, OC = HEAD_DIM_PAD / TX); DK (a multiple of 4 dividing
 * HEAD_DIM_PAD), NK (dividing BLOCK_B); VW (1, 2 or 4, dividing WA, WB and OC); VEC_LOAD (see
 * load_chunk); DS_STORED (0 or 1, above); HAS_SOFTCAP, HAS_MASK, HAS_ALIBI; LAYOUT (0 dense, 1
 * varlen, 2 packed).
 */

#define TY (BLOCK_A / WA)
#define TX (BLOCK_B / WB)
#define NT (TY * TX)
#define OC (HEAD_DIM_PAD / TX)
/* Local rows in VW-vectors, padded by one vector: a slice's head dim k holds the A rows (then
 * the B rows) of that dim; a C row holds its head dims; a P row holds one B row's A entries. */
#define AS_ROW (BLOCK_A / VW + 1)
#define BS_ROW (BLOCK_B / VW + 1)
#define CS_ROW (HEAD_DIM_PAD / VW + 1)
#define PS_ROW (BLOCK_A / VW + 1)
#define MAX2(a, b) ((a) > (b) ? (a) : (b))
/* One product slice (A1, B1, A2, B2 at DK dims); the slices alternate between the staging array
 * and the P array (free while the products run). The rank updates' C slices alternate between
 * the two halves of the staging array. */
#define SLICE_VECS (2 * DK * (AS_ROW + BS_ROW))
#define STAGE_VECS MAX2(SLICE_VECS, 2 * NK * CS_ROW)
#define PS_VECS MAX2(BLOCK_B * PS_ROW, SLICE_VECS)

#if BLOCK_A % WA || BLOCK_B % WB || HEAD_DIM_PAD % TX || WA % VW || WB % VW || OC % VW || DK % 4 ||              \
    HEAD_DIM_PAD % DK || BLOCK_B % NK
#error "attention_backward_blocked: tiles that do not divide"
#endif

#if HAS_MASK
#define KEY_KEPT(j) (mask[mrow + (long)(j) * mask_ss] > 0.5f)
#else
#define KEY_KEPT(j) true
#endif

/* Work-item lid's chunks (4 head dims of one row) of head dims d0 .. d0 + width - 1 of rows r0 ..
 * r0 + rows - 1 of X (row r at base + r * ss) into x, CHUNKS_OF(rows, width) of them: zeros for
 * rows outside [lo, hi], and for dropped keys where `keys` (the rows are keys). */
#define CHUNKS_OF(rows, width) (((rows) * (width) / 4 + NT - 1) / NT)
BLOCKED_INLINE void fetch_chunks(__global const store_t *X, long base, long ss, int rows, int width, int r0, int lo,
                                 int hi, int d0, bool keys, __global const float *mask, long mrow, long mask_ss,
                                 int head_dim, int lid, float4 *x)
{
    FCL_UNROLL_LOOP
    for (int l = 0; l < CHUNKS_OF(rows, width); l++) {
        const int e = lid + l * NT, row = r0 + e / (width / 4), d = d0 + 4 * (e % (width / 4));
        x[l] = (CHUNKS_OF(rows, width) * NT == rows * width / 4 || e < rows * width / 4) && row >= lo && row <= hi &&
                       d < head_dim && (!keys || KEY_KEPT(row))
                   ? load_chunk(X, base + (long)row * ss + d, d, head_dim)
                   : (float4)(0.0f);
    }
}

/* The chunks x (fetch_chunks') into `slice`, k-major: dim k's `rows` entries at k * row_vecs
 * vectors. */
BLOCKED_INLINE void stage_slice(__local floatv *slice, int row_vecs, int rows, int lid, const float4 *x)
{
    __local float *const s = (__local float *)slice;
    FCL_UNROLL_LOOP
    for (int l = 0; l < CHUNKS_OF(rows, DK); l++) {
        const int e = lid + l * NT, r = e / (DK / 4), k = 4 * (e % (DK / 4));
        if (CHUNKS_OF(rows, DK) * NT == rows * DK / 4 || e < rows * DK / 4) {
            s[k * row_vecs * VW + r] = x[l].s0;
            s[(k + 1) * row_vecs * VW + r] = x[l].s1;
            s[(k + 2) * row_vecs * VW + r] = x[l].s2;
            s[(k + 3) * row_vecs * VW + r] = x[l].s3;
        }
    }
}

/* x = A1 B1^T and y = A2 B2^T on this work-item's WA x WB entries, in one pass over the head
 * dims: A rows a0 .. a0 + BLOCK_A - 1 (zeros outside [a_lo, a_hi]), B rows b0 .. (zeros outside
 * [b_lo, b_hi]). While a slice is multiplied the next one is being fetched into registers.
 * Starts with a barrier (the staging and P arrays must be free for every work-item) and, when
 * its last slice sits in the P array, ends with one (P may be written after it). */
BLOCKED_INLINE void pair_products(__global const store_t *A1, long a1base, long a1_ss, __global const store_t *A2,
                                  long a2base, long a2_ss, int a0, int a_lo, int a_hi, __global const store_t *B1,
                                  long b1base, long b1_ss, __global const store_t *B2, long b2base, long b2_ss, int b0,
                                  int b_lo, int b_hi, int head_dim, int lid, int tx, int ty, __local floatv *stage,
                                  __local floatv *ps, float x[WA][WB], float y[WA][WB])
{
    float4 ra1[CHUNKS_OF(BLOCK_A, DK)], ra2[CHUNKS_OF(BLOCK_A, DK)], rb1[CHUNKS_OF(BLOCK_B, DK)], rb2[CHUNKS_OF(BLOCK_B, DK)];
    FCL_UNROLL_LOOP
    for (int i = 0; i < WA; i++)
        FCL_UNROLL_LOOP
        for (int c = 0; c < WB; c++)
            x[i][c] = y[i][c] = 0.0f;
    fetch_chunks(A1, a1base, a1_ss, BLOCK_A, DK, a0, a_lo, a_hi, 0, false, 0, 0, 0, head_dim, lid, ra1);
    fetch_chunks(A2, a2base, a2_ss, BLOCK_A, DK, a0, a_lo, a_hi, 0, false, 0, 0, 0, head_dim, lid, ra2);
    fetch_chunks(B1, b1base, b1_ss, BLOCK_B, DK, b0, b_lo, b_hi, 0, false, 0, 0, 0, head_dim, lid, rb1);
    fetch_chunks(B2, b2base, b2_ss, BLOCK_B, DK, b0, b_lo, b_hi, 0, false, 0, 0, 0, head_dim, lid, rb2);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int d0 = 0; d0 < HEAD_DIM_PAD; d0 += DK) {
        /* slice d0 / DK's buffer was last read two slices ago: every work-item is past it */
        __local floatv *const a1s = (d0 / DK) % 2 ? ps : stage, *const b1s = a1s + DK * AS_ROW;
        __local floatv *const a2s = b1s + DK * BS_ROW, *const b2s = a2s + DK * AS_ROW;
        stage_slice(a1s, AS_ROW, BLOCK_A, lid, ra1);
        stage_slice(a2s, AS_ROW, BLOCK_A, lid, ra2);
        stage_slice(b1s, BS_ROW, BLOCK_B, lid, rb1);
        stage_slice(b2s, BS_ROW, BLOCK_B, lid, rb2);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (d0 + DK < HEAD_DIM_PAD) {
            fetch_chunks(A1, a1base, a1_ss, BLOCK_A, DK, a0, a_lo, a_hi, d0 + DK, false, 0, 0, 0, head_dim, lid, ra1);
            fetch_chunks(A2, a2base, a2_ss, BLOCK_A, DK, a0, a_lo, a_hi, d0 + DK, false, 0, 0, 0, head_dim, lid, ra2);
            fetch_chunks(B1, b1base, b1_ss, BLOCK_B, DK, b0, b_lo, b_hi, d0 + DK, false, 0, 0, 0, head_dim, lid, rb1);
            fetch_chunks(B2, b2base, b2_ss, BLOCK_B, DK, b0, b_lo, b_hi, d0 + DK, false, 0, 0, 0, head_dim, lid, rb2);
        }
        FCL_UNROLL_LOOP
        for (int k = 0; k < DK; k++) {
            vec_u a1[WA / VW], a2[WA / VW], b1[WB / VW], b2[WB / VW];
            FCL_UNROLL_LOOP
            for (int i = 0; i < WA / VW; i++) {
                a1[i].v = a1s[k * AS_ROW + i * TY + ty];
                a2[i].v = a2s[k * AS_ROW + i * TY + ty];
            }
            FCL_UNROLL_LOOP
            for (int c = 0; c < WB / VW; c++) {
                b1[c].v = b1s[k * BS_ROW + c * TX + tx];
                b2[c].v = b2s[k * BS_ROW + c * TX + tx];
            }
            FCL_UNROLL_LOOP
            for (int i = 0; i < WA; i++)
                FCL_UNROLL_LOOP
                for (int c = 0; c < WB; c++) {
                    x[i][c] = fma(a1[i / VW].s[i % VW], b1[c / VW].s[c % VW], x[i][c]);
                    y[i][c] = fma(a2[i / VW].s[i % VW], b2[c / VW].s[c % VW], y[i][c]);
                }
        }
    }
#if (HEAD_DIM_PAD / DK) % 2 == 0
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
}

/* Writes this work-item's WA x WB values v to ps transposed (B row COL_OF(c, tx) holds the
 * A entries). */
BLOCKED_INLINE void store_transposed(__local floatv *ps, int tx, int ty, float v[WA][WB])
{
    __local float *const p = (__local float *)ps;
    FCL_UNROLL_LOOP
    for (int i = 0; i < WA; i++)
        FCL_UNROLL_LOOP
        for (int c = 0; c < WB; c++)
            p[COL_OF(c, tx) * PS_ROW * VW + ROW_OF(i, ty)] = v[i][c];
}

/* acc += P C over the tile's B rows: P from ps (BLOCK_B rows of BLOCK_A entries), C rows b0 ..
 * b0 + BLOCK_B - 1 of X (zeros outside [lo, hi], and for dropped keys where c_keys) through the staging array in NK-row slices, the next
 * one fetched into registers while one is used. Starts with a barrier (ps written, the staging
 * array free). */
BLOCKED_INLINE void rank_update(__global const store_t *X, long base, long ss, int b0, int lo, int hi, bool c_keys,
                                __global const float *mask, long mrow, long mask_ss, int head_dim, int lid, int tx,
                                int ty, __local floatv *stage, __local const floatv *ps, float acc[WA][OC])
{
    float4 rc[CHUNKS_OF(NK, HEAD_DIM_PAD)];
    fetch_chunks(X, base, ss, NK, HEAD_DIM_PAD, b0, lo, hi, 0, c_keys, mask, mrow, mask_ss, head_dim, lid, rc);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int n0 = 0; n0 < BLOCK_B; n0 += NK) {
        /* slice n0 / NK's half was last read two slices ago */
        __local floatv *const cs = stage + ((n0 / NK) % 2) * NK * CS_ROW;
        FCL_UNROLL_LOOP
        for (int l = 0; l < CHUNKS_OF(NK, HEAD_DIM_PAD); l++) {
            const int e = lid + l * NT;
            if (CHUNKS_OF(NK, HEAD_DIM_PAD) * NT == NK * HEAD_DIM_PAD / 4 || e < NK * HEAD_DIM_PAD / 4)
                vstore4(rc[l], 0, (__local float *)cs + (e / (HEAD_DIM_PAD / 4)) * CS_ROW * VW + 4 * (e % (HEAD_DIM_PAD / 4)));
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (n0 + NK < BLOCK_B)
            fetch_chunks(X, base, ss, NK, HEAD_DIM_PAD, b0 + n0 + NK, lo, hi, 0, c_keys, mask, mrow, mask_ss, head_dim, lid,
                             rc);
        FCL_UNROLL_LOOP
        for (int n = 0; n < NK; n++) {
            vec_u p[WA / VW], c[OC / VW];
            FCL_UNROLL_LOOP
            for (int i = 0; i < WA / VW; i++)
                p[i].v = ps[(n0 + n) * PS_ROW + i * TY + ty];
            FCL_UNROLL_LOOP
            for (int k = 0; k < OC / VW; k++)
                c[k].v = cs[n * CS_ROW + k * TX + tx];
            FCL_UNROLL_LOOP
            for (int i = 0; i < WA; i++)
                FCL_UNROLL_LOOP
                for (int k = 0; k < OC; k++)
                    acc[i][k] = fma(p[i / VW].s[i % VW], c[k / VW].s[k % VW], acc[i][k]);
        }
    }
}

/* Query row i of head h (of the sequence r at batch b): its LSE, delta, and the keys [*lo, *hi]
 * it sees; rows past i_last (or sq) and rows that saw no key (LSE = -inf) see none. */
inline void row_state(int i, int i_last, int b, int h, int Hq, seq_rows r, int sq_arg, int total_q,
                      __global const float *LSE, long lse_off, long lse_sb, long lse_sh, long lse_ss,
                      __global const float *delta, int window_left, int window_right, __global const int *bounds,
                      long off, long ss, float *lse, float *dlt, int *lo, int *hi)
{
    const bool in = i <= i_last && i < r.sq;
    *lse = in ? LSE[lse_off + b * lse_sb + h * lse_sh + (long)(r.q_first + i) * lse_ss] : -INFINITY;
    *dlt = in ? delta[scratch_row(b, h, Hq, i, r.q_first, sq_arg, total_q)] : 0.0f;
    *lo = 0;
    *hi = -1;
    if (in && *lse != -INFINITY)
        rows_keys(i, i, r.sk, r.sk - r.sq, window_left, window_right, bounds, off, ss, lo, hi);
}

/* Entry (i, j) of a tile: x = q.k becomes P, dp = dO.v becomes dS (both 0 where the row at
 * position pos cannot see key j). */
BLOCKED_INLINE void tile_p_ds(float *x, float *dp, bool visible, float lse, float dlt, float scale, float softcap,
                              float slope, int pos, int j)
{
    float dcap;
    const float s = backward_score(*x, scale, softcap, slope, pos, j, &dcap);
    const float pr = visible ? exp(s - lse) : 0.0f;
    *dp = visible ? pr * (*dp - dlt) * dcap : 0.0f;
    *x = pr;
}

#if DS_STORED
/* This work-item's dS of the dK/dV kernel's tile (v: keys j0 + ROW_OF(a, ty), rows i0 +
 * COL_OF(c, tx)) into `scores`, VW keys (one aligned vector) per store: rows up to i_end, key
 * vectors from the first up to j_last (their keys past j_last hold 0, inside the row's pitch). */
BLOCKED_INLINE void store_scores(__global float *scores, int b, int h, int Hq, int i0, int i_end, int j0, int j_last,
                                 int item_lo, int item_hi, int sq_arg, int tx, int ty, float v[WA][WB])
{
    FCL_UNROLL_LOOP
    for (int a = 0; a < WA; a += VW) {
        const int j = j0 + ROW_OF(a, ty);
        FCL_UNROLL_LOOP
        for (int c = 0; c < WB; c++) {
            const int i = i0 + COL_OF(c, tx);
            vec_u u;
            FCL_UNROLL_LOOP
            for (int e = 0; e < VW; e++)
                u.s[e] = v[a + e][c];
            if (j <= j_last && i <= i_end)
                *(__global floatv *)(scores + scores_index(b, h, Hq, i, j, item_lo, item_hi, sq_arg)) = u.v;
        }
    }
}

/* This work-item's dS of the dQ kernel's tile of keys j0 .. (up to j_hi) into x, VW keys (one
 * aligned vector: j0 - item_lo is a multiple of VW) per load: rows i0 + ROW_OF(a, ty), keys j0 +
 * COL_OF(c, tx), 0 where the row does not see the key ([lo[a], hi[a]]: the pairs the dK/dV kernel
 * may not have visited). */
BLOCKED_INLINE void load_scores(__global const float *scores, int b, int h, int Hq, int i0, int j0, int j_hi,
                                const int *lo, const int *hi, int item_lo, int item_hi, int sq_arg, int tx, int ty,
                                float x[WA][WB])
{
    const int j_end = min(j0 + BLOCK_B - 1, j_hi);
    FCL_UNROLL_LOOP
    for (int a = 0; a < WA; a++)
        FCL_UNROLL_LOOP
        for (int c = 0; c < WB; c += VW) {
            const int j = j0 + COL_OF(c, tx);
            vec_u u;
            u.v = j <= j_end && j + VW - 1 >= lo[a] && j <= hi[a]
                      ? *(__global const floatv *)(scores + scores_index(b, h, Hq, i0 + ROW_OF(a, ty), j, item_lo,
                                                                         item_hi, sq_arg))
                      : (floatv)(0.0f);
            FCL_UNROLL_LOOP
            for (int e = 0; e < VW; e++)
                x[a][c + e] = j + e <= j_end && j + e >= lo[a] && j + e <= hi[a] ? u.s[e] : 0.0f;
        }
}
#endif

__kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void attention_backward_dkdv(BACKWARD_ARGS)
{
    __local floatv stage[STAGE_VECS];
    __local floatv ps[PS_VECS]; /* P, then dS, transposed: a query row's keys */
    __local int rlo[BLOCK_B], rhi[BLOCK_B];
    __local float lse_s[BLOCK_B], delta_s[BLOCK_B];
    const int lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    int key_block, hk, b; /* earlier key blocks are seen by more rows (causal): they start first */
    fcl_group_order(0, &key_block, &hk, &b);
#if DS_STORED
    key_block += item_lo / BLOCK_A; /* the launch's first key block */
#endif
    const int Hq = get_global_size(1) * group;
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
    const int shift = r.sk - r.sq;
    const int j0 = key_block * BLOCK_A, j_last = min(j0 + BLOCK_A, r.sk) - 1;
    int i_lo, i_hi; /* the query rows that may see some key of this block (before masks) */
    keys_rows(j0, j_last, r.sq, shift, window_left, window_right, cu_q, cu_q_off, seq_ss, &i_lo, &i_hi);
    const long mrow = mask_off + b * mask_sb + (long)r.k_first * mask_ss;
    bool kept[WA];
    FCL_UNROLL_LOOP
    for (int a = 0; a < WA; a++) {
        const int j = j0 + ROW_OF(a, ty);
        kept[a] = j <= j_last && KEY_KEPT(j);
    }
    const long kbase = k_off + b * k_sb + (long)r.k_first * k_ss + hk * k_sh;
    const long vbase = v_off + b * v_sb + (long)r.k_first * v_ss + hk * v_sh;

    float dk[WA][OC], dv[WA][OC], s[WA][WB], dp[WA][WB];
    FCL_UNROLL_LOOP
    for (int a = 0; a < WA; a++)
        FCL_UNROLL_LOOP
        for (int c = 0; c < OC; c++)
            dk[a][c] = dv[a][c] = 0.0f;

    for (int g = 0; g < group && i_lo <= i_hi; g++) {
        const int h = hk * group + g;
        const float slope = HEAD_SLOPE(h);
        const long qbase = q_off + b * q_sb + (long)r.q_first * q_ss + h * q_sh;
        const long dobase = do_off + b * do_sb + (long)r.q_first * do_ss + h * do_sh;
        for (int i0 = i_lo; i0 <= i_hi; i0 += BLOCK_B) {
            const int i_end = min(i0 + BLOCK_B - 1, i_hi);
            for (int m = lid; m < BLOCK_B; m += NT) { /* read after pair_products' barriers */
                float lse, dlt;
                int lo, hi;
                row_state(i0 + m, i_end, b, h, Hq, r, sq_arg, total_q, LSE, lse_off, lse_sb, lse_sh, lse_ss, delta,
                          window_left, window_right, cu_q, cu_q_off, seq_ss, &lse, &dlt, &lo, &hi);
                lse_s[m] = lse;
                delta_s[m] = dlt;
                rlo[m] = lo;
                rhi[m] = hi;
            }
            pair_products(K, kbase, k_ss, V, vbase, v_ss, j0, j0, j_last, Q, qbase, q_ss, dO, dobase, do_ss, i0, i0,
                          i_end, head_dim, lid, tx, ty, stage, ps, s, dp);
            FCL_UNROLL_LOOP
            for (int a = 0; a < WA; a++) {
                const int j = j0 + ROW_OF(a, ty);
                FCL_UNROLL_LOOP
                for (int c = 0; c < WB; c++) {
                    const int m = COL_OF(c, tx);
                    tile_p_ds(&s[a][c], &dp[a][c], kept[a] && j >= rlo[m] && j <= rhi[m], lse_s[m], delta_s[m], scale,
                              softcap, slope, i0 + m + shift, j);
                }
            }
#if DS_STORED
            store_scores(scores, b, h, Hq, i0, i_end, j0, j_last, item_lo, item_hi, sq_arg, tx, ty, dp);
#endif
            store_transposed(ps, tx, ty, s);
            rank_update(dO, dobase, do_ss, i0, i0, i_end, false, mask, mrow, mask_ss, head_dim, lid, tx, ty, stage, ps,
                        dv);
            barrier(CLK_LOCAL_MEM_FENCE); /* every work-item is past P */
            store_transposed(ps, tx, ty, dp);
            rank_update(Q, qbase, q_ss, i0, i0, i_end, false, mask, mrow, mask_ss, head_dim, lid, tx, ty, stage, ps,
                        dk);
        }
    }

    FCL_UNROLL_LOOP
    for (int a = 0; a < WA; a++) {
        const int j = j0 + ROW_OF(a, ty);
        if (j > j_last)
            continue;
        const long dkrow = dk_off + b * dk_sb + (long)(r.k_first + j) * dk_ss + hk * dk_sh;
        const long dvrow = dv_off + b * dv_sb + (long)(r.k_first + j) * dv_ss + hk * dv_sh;
        FCL_UNROLL_LOOP
        for (int c = 0; c < OC; c++) {
            const int d = COL_OF(c, tx);
            if (d < head_dim) {
                STORE(dK, dkrow + d, dk[a][c] * scale);
                STORE(dV, dvrow + d, dv[a][c]);
            }
        }
    }
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void attention_backward_dq(BACKWARD_ARGS)
{
    __local floatv stage[STAGE_VECS];
    __local floatv ps[PS_VECS]; /* dS transposed: a key's query rows */
    const int lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    int row_block, h, b; /* later row blocks see more keys (causal): they start first */
    fcl_group_order(1, &row_block, &h, &b);
    const int hk = h / group, Hq = get_global_size(1);
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
    const int shift = r.sk - r.sq;
    const int i0 = row_block * BLOCK_A, i_last = min(i0 + BLOCK_A, r.sq) - 1;
    int j_lo, j_hi; /* the keys that some row of this block may see (before masks) */
    rows_keys(i0, i_last, r.sk, shift, window_left, window_right, cu_q, cu_q_off, seq_ss, &j_lo, &j_hi);
#if DS_STORED
    j_lo = max(j_lo - j_lo % VW, item_lo); /* the launch's keys, tiles from a vector of load_scores */
    j_hi = min(j_hi, item_hi);
#endif
    const float slope = HEAD_SLOPE(h);
    const long mrow = mask_off + b * mask_sb + (long)r.k_first * mask_ss;
    const long qbase = q_off + b * q_sb + (long)r.q_first * q_ss + h * q_sh;
    const long dobase = do_off + b * do_sb + (long)r.q_first * do_ss + h * do_sh;
    const long kbase = k_off + b * k_sb + (long)r.k_first * k_ss + hk * k_sh;
    const long vbase = v_off + b * v_sb + (long)r.k_first * v_ss + hk * v_sh;

    float lse[WA], dlt[WA], dq[WA][OC], dp[WA][WB];
#if !DS_STORED
    float s[WA][WB];
#endif
    int lo[WA], hi[WA];
    FCL_UNROLL_LOOP
    for (int a = 0; a < WA; a++) {
        row_state(i0 + ROW_OF(a, ty), i_last, b, h, Hq, r, sq_arg, total_q, LSE, lse_off, lse_sb, lse_sh, lse_ss, delta,
                  window_left, window_right, cu_q, cu_q_off, seq_ss, &lse[a], &dlt[a], &lo[a], &hi[a]);
        const long srow = scratch_row(b, h, Hq, i0 + ROW_OF(a, ty), r.q_first, sq_arg, total_q);
        FCL_UNROLL_LOOP
        for (int c = 0; c < OC; c++)
            dq[a][c] = DS_STORED && load_state && i0 + ROW_OF(a, ty) <= i_last
                           ? state[srow * HEAD_DIM_PAD + COL_OF(c, tx)] : 0.0f;
    }

#if DS_STORED
    if (j_lo <= j_hi)
        load_scores(scores, b, h, Hq, i0, j_lo, j_hi, lo, hi, item_lo, item_hi, sq_arg, tx, ty, dp);
#endif
    for (int j0 = j_lo; j0 <= j_hi; j0 += BLOCK_B) {
        const int j_end = min(j0 + BLOCK_B - 1, j_hi);
#if DS_STORED
        barrier(CLK_LOCAL_MEM_FENCE); /* every work-item is past the last tile's dS */
        store_transposed(ps, tx, ty, dp);
        if (j0 + BLOCK_B <= j_hi) /* the next tile's dS, loaded during this tile's update */
            load_scores(scores, b, h, Hq, i0, j0 + BLOCK_B, j_hi, lo, hi, item_lo, item_hi, sq_arg, tx, ty, dp);
#else
        pair_products(Q, qbase, q_ss, dO, dobase, do_ss, i0, i0, i_last, K, kbase, k_ss, V, vbase, v_ss, j0, j0, j_end,
                      head_dim, lid, tx, ty, stage, ps, s, dp);
        FCL_UNROLL_LOOP
        for (int a = 0; a < WA; a++) {
            const int pos = i0 + ROW_OF(a, ty) + shift;
            FCL_UNROLL_LOOP
            for (int c = 0; c < WB; c++) {
                const int j = j0 + COL_OF(c, tx);
                tile_p_ds(&s[a][c], &dp[a][c], j >= lo[a] && j <= hi[a] && KEY_KEPT(j), lse[a], dlt[a], scale, softcap,
                          slope, pos, j);
            }
        }
        store_transposed(ps, tx, ty, dp);
#endif
        rank_update(K, kbase, k_ss, j0, j0, j_end, true, mask, mrow, mask_ss, head_dim, lid, tx, ty, stage, ps, dq);
    }

    FCL_UNROLL_LOOP
    for (int a = 0; a < WA; a++) {
        const int i = i0 + ROW_OF(a, ty);
        if (i > i_last)
            continue;
        const long dqrow = dq_off + b * dq_sb + (long)(r.q_first + i) * dq_ss + h * dq_sh;
        const long srow = scratch_row(b, h, Hq, i, r.q_first, sq_arg, total_q);
        FCL_UNROLL_LOOP
        for (int c = 0; c < OC; c++) {
            const int d = COL_OF(c, tx);
            if (DS_STORED && save_state)
                state[srow * HEAD_DIM_PAD + d] = dq[a][c];
            else if (d < head_dim)
                STORE(dQ, dqrow + d, dq[a][c] * scale);
        }
    }
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decode's partial kernel for CPUs (-D DECODE_CPU 1; with attention_decode.cl's helpers, its
 * decode_mask_len and decode_combine): the same splits, rows, visibility and split states as
 * decode_partial, shaped for a CPU core's vector unit. A decode row block has few rows (the
 * query heads of a KV head times Lq: 4 to 8 for common GQA), so the vectors run along the keys
 * and the head dims instead of the rows:
 *
 *   S = Q K^T  for QK_KEYS keys of a batch of SIMD keys at a time, SIMD-wide partial dot
 *              products along the head dims (ROWS_WG x QK_KEYS independent FMA chains), then one
 *              reduction tree per row turns the batch's SIMD partial vectors into one vector of
 *              its SIMD scores (lane = key): log2(SIMD) levels of pairwise sums, two two-source
 *              shuffles and an add each;
 *   softmax    per row on that vector: visibility, soft-capping and ALiBi lane-wise, the batch
 *              maximum by one horizontal reduction, exp2 on the vector; the row's sum stays a
 *              vector until the split ends, and its rescale (a scalar exp2) runs only in the
 *              batches where its maximum moves;
 *   O += P V   PV_CHUNKS x SIMD dims of every row at a time in registers while the batch's V
 *              rows stream by, each V chunk read and converted once for all the rows; the V of
 *              a key no row sees is not read (a dropped slot may hold anything).
 * K and V are read straight from the cache (paged or contiguous), each element once per
 * work-item; work-groups of one work-item (the table's CPU decode tiles: one work-item owning
 * every dim). With HEADS > 1 a work-item takes every KV head of its split and row block, batch
 * by batch: a cache [B, L, Hkv, D] then streams by in whole rows of Hkv x D, where one head's
 * rows lie Hkv x D elements apart (a page or more: the hardware prefetchers stop at each).
 * Queries, accumulators and states as decode_partial: the split's unnormalised state to `part`,
 * or with DIRECT_OUT O and LSE.
 *
 * Specialisation (-D), beside attention_decode.cl's: DECODE_CPU 1; SIMD (4, 8 or 16: floats per
 * vector, the device's native width; HEAD_DIM_PAD a multiple of it); HEADS (KV heads per
 * work-item: 1, or all of them, the grid then having no KV head dimension).
 */

#if HEAD_DIM_PAD % SIMD
#error "DECODE_CPU: HEAD_DIM_PAD a multiple of SIMD"
#endif
#define CHUNKS (HEAD_DIM_PAD / SIMD)
#ifndef HEADS
#define HEADS 1
#endif
/* Software prefetch: a row's K AHEAD keys before its use, and its V when its K is read (V is
 * used after the batch's softmax). Against both two batches ahead: 1.1-1.2x the GB/s at 64k keys
 * on a 2-core Xeon (docs/perf/history.md v0.32.0); half a batch for both measured within the
 * spread on a 2-core EPYC (v0.26.0). */
#define AHEAD (SIMD / 2)
/* BF16 rows in pairs of chunks (PAIRED): 2 x SIMD elements read as SIMD 32-bit words, the even
 * elements (word << 16) one vector and the odd ones (word & 0xffff0000) the next, where widening
 * each element to 32 bits takes a lane-crossing shuffle per vector (1.06x the decode's compute
 * rate on a 2-core Xeon, docs/perf/history.md v0.32.0). Q and the accumulators keep their dims
 * in that order; unpair puts the accumulators back before they are stored. Little-endian
 * devices only (the even element in a word's low half). */
#if FCL_DTYPE == 2 && CHUNKS % 2 == 0 && defined(__ENDIAN_LITTLE__)
#define PAIRED 1
#else
#define PAIRED 0
#endif
#define STEP (PAIRED ? 2 : 1) /* chunks read at a time */
/* The FMA chains of a step: at most CHAINS accumulators (half the vector registers: 32 with 16
 * floats per vector, AVX-512, else 16), the rest holding the loaded K or V chunks. Q K^T takes
 * QK_KEYS = 2 keys and P V PV_CHUNKS = 4 chunks of dims at a time, so each K or V chunk, Q chunk
 * and probability loaded feeds 2 or 4 x ROWS_WG chains (A/B on a 2-core EPYC, docs/perf/history.md:
 * F32 v0.26.0, 12% more GB/s on Intel's runtime, -5 to +2% on PoCL; 16-bit caches v0.31.0, 3-17%
 * more on both, where one key and one chunk had measured as fast in v0.26.0). Fewer where
 * ROWS_WG rows would need more chains, or the chunks do not divide; PAIRED chunks go by two. */
#define CHAINS (SIMD >= 16 ? 16 : 8)
#define QK_KEYS (2 * ROWS_WG <= CHAINS ? 2 : 1)
#define PV_CHUNKS (4 * ROWS_WG <= CHAINS && CHUNKS % 4 == 0 ? 4 : (2 * ROWS_WG <= CHAINS || PAIRED) && CHUNKS % 2 == 0 ? 2 : 1)
#define CPU_LOOP _Pragma("unroll")

/* SIMD elements of a K or V row from element index i, whose first is dim d0, as floats: one
 * vector load when all lie below head_dim, element by element at the edge, zeros past it. */
inline simd_f load_dims(__global const store_t *p, long i, int d0, int head_dim)
{
    if (FULL_DIM || d0 + SIMD <= head_dim) /* FULL_DIM: HEAD_DIM_PAD, a multiple of SIMD, is the head dim */
        return simd_load(p, i);
    simd_fu u;
    for (int e = 0; e < SIMD; e++)
        u.s[e] = d0 + e < head_dim ? LOAD(p, i + e) : 0.0f;
    return u.v;
}

#if SIMD == 16
#define WORDS(p) ((uint16)(as_uint8(vload16(0, p)), as_uint8(vload16(0, (p) + 16))))
#elif SIMD == 8
#define WORDS(p) ((uint8)(as_uint4(vload8(0, p)), as_uint4(vload8(0, (p) + 8))))
#else
#define WORDS(p) ((uint4)(as_uint2(vload4(0, p)), as_uint2(vload4(0, (p) + 4))))
#endif

/* Chunks c .. c + STEP - 1 of the row whose element index is `row`, as floats, into x[0 ..
 * STEP - 1]; zeros past head_dim. */
inline void load_chunks(__global const store_t *p, long row, int c, int head_dim, __private simd_f *x)
{
#if PAIRED
    const int d0 = c * SIMD;
    if (FULL_DIM || d0 + 2 * SIMD <= head_dim) {
        const __global ushort *u = (__global const ushort *)p + row + d0;
        x[0] = SIMD_AS_F(WORDS(u) << 16);
        x[1] = SIMD_AS_F(WORDS(u) & 0xffff0000u);
        return;
    }
    simd_fu even, odd;
    for (int e = 0; e < SIMD; e++) {
        even.s[e] = d0 + 2 * e < head_dim ? LOAD(p, row + d0 + 2 * e) : 0.0f;
        odd.s[e] = d0 + 2 * e + 1 < head_dim ? LOAD(p, row + d0 + 2 * e + 1) : 0.0f;
    }
    x[0] = even.v;
    x[1] = odd.v;
#else
    x[0] = load_dims(p, row + c * SIMD, c * SIMD, head_dim);
#endif
}

#if PAIRED
/* A row's CHUNKS vectors from the paired order (even dims, odd dims of each 2 x SIMD block) back
 * to the dims' order. */
inline void unpair(__private simd_f *x)
{
    for (int c = 0; c < CHUNKS; c += 2) {
        simd_fu even, odd, lo, hi;
        even.v = x[c];
        odd.v = x[c + 1];
        for (int e = 0; e < SIMD / 2; e++) {
            lo.s[2 * e] = even.s[e];
            lo.s[2 * e + 1] = odd.s[e];
            hi.s[2 * e] = even.s[SIMD / 2 + e];
            hi.s[2 * e + 1] = odd.s[SIMD / 2 + e];
        }
        x[c] = lo.v;
        x[c + 1] = hi.v;
    }
}
#endif

/* The vector of the SIMD keys' scores from their partial vectors x[0 .. SIMD - 1] (lane l of
 * the result: the sum of x[l]'s lanes): pairwise sums of halves, log2(SIMD) levels. */
inline simd_f reduce_keys(simd_f *x)
{
    CPU_LOOP
    for (int n = SIMD; n > 1; n /= 2) /* x[0 .. n - 1]: SIMD / n keys each, n lanes per key */
        CPU_LOOP
        for (int i = 0; i < n / 2; i++)
            x[i] = simd_pair_sum(x[2 * i], x[2 * i + 1]);
    return x[0];
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void decode_partial_cpu(DECODE_PARTIAL_ARGS)
{
    DECODE_PARTIAL_UNPACK
    const int n_rows = group * lq; /* rows of a KV head: (query head, position) pairs */
    int split, hk_first, r0, b, Hq, p_first, j_lo, j_hi;
    decode_group(ROWS_WG, row_blocks, group, lq, host_len, lens, lens_off, lens_s, l_max, split_keys, window_left,
                 &split, &hk_first, &r0, &b, &Hq, &p_first, &j_lo, &j_hi);
#if HEADS > 1 /* every KV head in this work-item: the grid has no KV head dimension */
    hk_first = 0;
    Hq = HEADS * group;
#endif
    const float qscale = decode_qscale(scale);
    simd_f q[HEADS][ROWS_WG][CHUNKS], acc[HEADS][ROWS_WG][CHUNKS];
    simd_f l[HEADS][ROWS_WG]; /* the rows' running sums, lane by lane (summed when the split ends) */
    float m[HEADS][ROWS_WG], slope[HEADS][ROWS_WG];
    int lo[HEADS][ROWS_WG], hi[HEADS][ROWS_WG], pos[HEADS][ROWS_WG];
    for (int g = 0; g < HEADS; g++)
        for (int r = 0; r < ROWS_WG; r++) {
            const int hk = hk_first + g;
            decode_row_view(r0 + r, j_hi, n_rows, lq, hk, group, p_first, b, window_left, alibi, alibi_off, alibi_sb,
                            alibi_sh, &lo[g][r], &hi[g][r], &pos[g][r], &slope[g][r]);
            const int row = min(r0 + r, n_rows - 1), h = hk * group + row / lq, t = row % lq;
            const long qi = q_off + b * q_sb + (long)t * q_ss + h * q_sh;
            for (int c = 0; c < CHUNKS; c += STEP)
                load_chunks(Q, qi, c, head_dim, &q[g][r][c]);
            for (int c = 0; c < CHUNKS; c++) {
                q[g][r][c] *= qscale;
                acc[g][r][c] = (simd_f)(0.0f);
            }
            m[g][r] = -INFINITY;
            l[g][r] = (simd_f)(0.0f);
        }
    simd_fu lane_u;
    for (int e = 0; e < SIMD; e++)
        lane_u.s[e] = (float)e;
    const simd_f lane = lane_u.v;

    for (int jb = j_lo; jb <= j_hi; jb += SIMD) {
#if HAS_MASK
        simd_fu kept_u;
        for (int k = 0; k < SIMD; k++)
            kept_u.s[k] = mask[mask_off + b * mask_sb + (long)min(jb + k, l_max - 1) * mask_ss];
        const simd_i kept = kept_u.v > 0.5f;
#endif
        /* the batch's keys head by head: with HEADS > 1 the heads' rows of a key lie side by
         * side, so the batch's K and V are read as whole contiguous rows of the cache */
        for (int g = 0; g < HEADS; g++) {
            const int hk = hk_first + g;
            long ki[SIMD], vi[SIMD];
            simd_f part[ROWS_WG][SIMD];
            for (int k0 = 0; k0 < SIMD; k0 += QK_KEYS) {
                CPU_LOOP
                for (int k = k0; k < k0 + QK_KEYS; k++) {
                    cache_rows(b, min(jb + k, j_hi), hk, k_off, k_s0, k_s1, k_sh, v_off, v_s0, v_s1, v_sh, table,
                               bt_off, bt_sb, bt_ss, page_size, num_pages, &ki[k], &vi[k]);
                    /* every cache line of the K row AHEAD keys on and of this key's V row: a KV
                     * head's rows lie a page or more apart, where the hardware prefetchers stop,
                     * so each row would be a demand miss of its own */
                    const int ahead = jb + k + AHEAD <= j_hi;
                    const long ka = ahead ? cache_row(b, jb + k + AHEAD, hk, k_off, k_s0, k_s1, k_sh, table, bt_off,
                                                      bt_sb, bt_ss, page_size, num_pages)
                                          : 0;
                    if (ahead)
                        fcl_prefetch_row(Kc, ka, head_dim);
                    fcl_prefetch_row(Vc, vi[k], head_dim);
                }
                /* the QK_KEYS keys against every row, chunk by chunk: ROWS_WG x QK_KEYS chains */
                simd_f x[ROWS_WG][QK_KEYS];
                CPU_LOOP
                for (int r = 0; r < ROWS_WG; r++)
                    CPU_LOOP
                    for (int kk = 0; kk < QK_KEYS; kk++)
                        x[r][kk] = (simd_f)(0.0f);
                for (int c = 0; c < CHUNKS; c += STEP) {
                    simd_f kc[QK_KEYS][STEP];
                    CPU_LOOP
                    for (int kk = 0; kk < QK_KEYS; kk++)
                        load_chunks(Kc, ki[k0 + kk], c, head_dim, kc[kk]);
                    CPU_LOOP
                    for (int r = 0; r < ROWS_WG; r++)
                        CPU_LOOP
                        for (int s = 0; s < STEP; s++) {
                            const simd_f qc = q[g][r][c + s];
                            CPU_LOOP
                            for (int kk = 0; kk < QK_KEYS; kk++)
                                x[r][kk] = fma(qc, kc[kk][s], x[r][kk]);
                        }
                }
                CPU_LOOP
                for (int r = 0; r < ROWS_WG; r++)
                    CPU_LOOP
                    for (int kk = 0; kk < QK_KEYS; kk++)
                        part[r][k0 + kk] = x[r][kk];
            }

            /* the batch's keys lane by lane: visibility, logits, the rows' online softmax */
            const simd_f jv = lane + (float)jb;
            float p[ROWS_WG][SIMD]; /* the batch's probabilities, row by row */
            float alpha[ROWS_WG];
            simd_i live = (simd_i)(0); /* where some row sees the key */
            for (int r = 0; r < ROWS_WG; r++) {
                simd_f x = simd_logit(reduce_keys(part[r]), softcap, (simd_f)(slope[g][r]),
                                      fabs((float)pos[g][r] - jv));
                simd_i visible = jv >= (float)lo[g][r] & jv <= (float)hi[g][r];
#if HAS_MASK
                visible &= kept;
#endif
                live |= visible;
                x = select((simd_f)(-INFINITY), x, visible);
                const float mx = fmax(m[g][r], simd_max(x));
                alpha[r] = mx == m[g][r] ? 1.0f : exp2(m[g][r] - mx); /* -inf to -inf: 1 */
                const simd_f pr = mx == -INFINITY ? (simd_f)(0.0f) : exp2(x - mx);
                l[g][r] = l[g][r] * alpha[r] + pr;
                m[g][r] = mx;
                simd_store(pr, p[r]);
            }
            simd_iu live_u;
            live_u.v = live;

            /* acc = acc * alpha + p V, PV_CHUNKS chunks of dims of every row at a time while the
             * batch's V rows stream by (ROWS_WG x PV_CHUNKS chains); the V of a key no row sees is
             * not read (a dropped slot may hold anything) but taken as zeros */
            for (int c0 = 0; c0 < CHUNKS; c0 += PV_CHUNKS) {
                simd_f a[ROWS_WG][PV_CHUNKS];
                CPU_LOOP
                for (int r = 0; r < ROWS_WG; r++)
                    CPU_LOOP
                    for (int cc = 0; cc < PV_CHUNKS; cc++)
                        a[r][cc] = acc[g][r][c0 + cc] * alpha[r];
                for (int k = 0; k < SIMD; k++) {
                    const int seen = live_u.s[k] != 0;
                    simd_f vc[PV_CHUNKS];
                    CPU_LOOP
                    for (int cc = 0; cc < PV_CHUNKS; cc += STEP)
                        if (seen)
                            load_chunks(Vc, vi[k], c0 + cc, head_dim, &vc[cc]);
                        else
                            CPU_LOOP
                            for (int s = 0; s < STEP; s++)
                                vc[cc + s] = (simd_f)(0.0f);
                    CPU_LOOP
                    for (int r = 0; r < ROWS_WG; r++) {
                        const simd_f pk = (simd_f)(p[r][k]);
                        CPU_LOOP
                        for (int cc = 0; cc < PV_CHUNKS; cc++)
                            a[r][cc] = fma(pk, vc[cc], a[r][cc]);
                    }
                }
                CPU_LOOP
                for (int r = 0; r < ROWS_WG; r++)
                    CPU_LOOP
                    for (int cc = 0; cc < PV_CHUNKS; cc++)
                        acc[g][r][c0 + cc] = a[r][cc];
            }
        }
    }

    /* The split's state: part[((b * Hq + h) * lq + t) * n_splits + split] = acc[HDP], m, l; with
     * DIRECT_OUT the rows' O and LSE. */
    for (int g = 0; g < HEADS; g++)
        for (int r = 0; r < ROWS_WG; r++) {
            const int row = r0 + r, hk = hk_first + g;
            if (row >= n_rows)
                break;
#if PAIRED
            unpair(acc[g][r]);
#endif
            const float sum = simd_sum(l[g][r]);
#if DIRECT_OUT
            const int h = hk * group + row / lq, t = row % lq;
            const long oi = o_off + b * o_sb + (long)t * o_ss + h * o_sh;
            const float inv_l = sum > 0.0f ? 1.0f / sum : 0.0f;
            for (int c = 0; c < CHUNKS; c++) {
                simd_fu x;
                x.v = acc[g][r][c] * inv_l;
                for (int e = 0; e < SIMD && c * SIMD + e < head_dim; e++)
                    STORE(O, oi + c * SIMD + e, x.s[e]);
            }
            if (write_lse)
                LSE[lse_off + b * lse_sb + h * lse_sh + (long)t * lse_ss] = fcl_row_lse(m[g][r], sum);
#else
            const long slot = (((long)b * Hq + hk * group + row / lq) * lq + row % lq) * n_splits + split;
            for (int c = 0; c < CHUNKS; c++)
                simd_store(acc[g][r][c], part + slot * PART_LD + c * SIMD);
            part[slot * PART_LD + HEAD_DIM_PAD] = m[g][r];
            part[slot * PART_LD + HEAD_DIM_PAD + 1] = sum;
#endif
        }
}

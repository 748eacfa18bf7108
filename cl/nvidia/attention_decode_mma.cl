/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decode attention on NVIDIA tensor cores (compute capability >= 8.0): decode_partial_mma, the
 * tensor-core form of decode_partial (attention_decode.cl, whose arguments, key splits, row
 * views and split states it shares; decode_combine there merges its states). F16 or BF16
 * storage, 16-byte aligned K/V rows (WIDE), no validity mask (the host keeps masks on
 * decode_partial, which zeroes the V of dropped slots).
 *
 * A work-group is MMA_WARPS warps. It takes one key split of one block of 16 query rows (the
 * KV head's query heads x positions; rows past them are zeros and see no key) of one batch.
 * Each warp streams its own keys of the split, 16 at a time (warp w: keys j_lo + 16 w +
 * 16 MMA_WARPS n), with the block's Q fragments in registers:
 *  - S = Q K^T by mma.sync m16n8k16 (two n8 tiles of keys, HEAD_DIM_PAD / 16 k steps; K's B
 *    fragments by ldmatrix);
 *  - the online softmax on the S fragments: each lane holds rows g and g + 8 (g = lane / 4),
 *    their maxima met over the lane's quad; each lane sums its own p's;
 *  - O += P V: P's A fragment straight from the S fragments (rounded to the storage dtype, as
 *    in FlashAttention), V's B fragments by ldmatrix.trans, HEAD_DIM_PAD / 8 n8 tiles of O.
 * The warp copies its keys' K and V rows by cp.async into its own ring of ASYNC_STAGES stages in
 * local memory (laid out so that ldmatrix reads them without bank conflicts: RING_PITCH),
 * ASYNC_STAGES - 1 steps ahead; a warp barrier makes a landed stage visible to the warp and keeps
 * a stage from being refilled while a lane still reads it: no work-group barrier in the key loop.
 * Keys past the split's last visible key are copied as zeros. Each warp writes its own split
 * state: slot split * MMA_WARPS + w of its rows, so decode_combine takes n_splits * MMA_WARPS
 * splits. With DIRECT_OUT (one split) the warps' states meet in local memory instead (each in
 * its own ring, no longer read) and the work-group writes its rows' O and LSE.
 *
 * Specialisation (-D), beside attention_decode.cl's: DECODE_MMA 1; MMA_WARPS; ASYNC_STAGES (the
 * ring's stages, 2 to 4); needs warp_nv.cl and mma_nv.cl before attention_decode.cl.
 */

#define MMA_KEYS 16                                   /* keys per warp and step */
#define MMA_BATCH (MMA_WARPS * MMA_KEYS)              /* keys per work-group and step */
#define ROW_CHUNKS (HEAD_DIM_PAD / 8)                 /* 16-byte chunks per row */
#if ROW_CHUNKS % 8 == 0
/* rows of whole 128-byte spans, unpadded: chunk c of row r sits at c ^ (r % 8), so the 8 rows
 * that one ldmatrix matrix reads fall into 8 different 16-byte bank groups */
#define RING_PITCH HEAD_DIM_PAD
#define CHUNK_AT(r, c) ((r) * RING_PITCH + (((c) ^ ((r) & 7)) * 8))
#else
/* rows padded by 8 halves (ROW_HALVES): the same spread by the pitch */
#define RING_PITCH ROW_HALVES
#define CHUNK_AT(r, c) ((r) * RING_PITCH + (c) * 8)
#endif
#define TILE_HALVES (MMA_KEYS * RING_PITCH)           /* one stage's K (or V) rows */
#define LANE_CHUNKS (MMA_KEYS * ROW_CHUNKS / 32)      /* chunks of K (and of V) a lane copies per step */
#if HEAD_DIM_PAD % 16 || !ASYNC_STAGES || !WIDE || HAS_MASK
#error "decode_partial_mma: HEAD_DIM_PAD a multiple of 16, ASYNC_STAGES, WIDE, no HAS_MASK"
#endif

/* Starts this lane's copies of keys jt .. jt + 15 (K into Kst, V into Vst): chunk lane + 32 i is
 * row (lane + 32 i) / ROW_CHUNKS, dims 8 x its remainder; keys past j_hi (addressed as j_hi)
 * and dims past head_dim become zeros. Contiguous caches address row j at k_row0 + j * k_s1 (v
 * likewise); with `whole` (every key of the step at or below j_hi, head_dim == HEAD_DIM_PAD:
 * uniform over the warp) nothing is checked and rows step by k_s1 from the lane's first. */
MMA_INLINE void issue_keys(const bool whole, __local ushort *Kst, __local ushort *Vst, int jt, int j_hi, int lane,
                           int head_dim, int b, int hk, __global const store_t *Kc, __global const store_t *Vc,
                           __global const store_t *k_row0, __global const store_t *v_row0, long k_off, long k_s0,
                           long k_s1, long k_sh, long v_off, long v_s0, long v_s1, long v_sh,
                           __global const int *table, long bt_off, long bt_sb, long bt_ss, int page_size,
                           int num_pages)
{
#if !PAGED
    const int n0 = lane / ROW_CHUNKS, d0 = (lane - n0 * ROW_CHUNKS) * 8;
    __global const store_t *kp0 = k_row0 + (long)(jt + n0) * k_s1 + d0, *vp0 = v_row0 + (long)(jt + n0) * v_s1 + d0;
#endif
    #pragma unroll
    for (int i = 0; i < LANE_CHUNKS; i++) {
        const int c = lane + 32 * i, n = c / ROW_CHUNKS, d = (c - n * ROW_CHUNKS) * 8, j = jt + n;
#if !PAGED
        if (whole && 32 % ROW_CHUNKS == 0) { /* the lane's rows step by 32 / ROW_CHUNKS, its dims stay */
            const long r = (long)(i * (32 / ROW_CHUNKS));
            async_copy16(Kst + CHUNK_AT(n, d / 8), kp0 + r * k_s1, 16);
            async_copy16(Vst + CHUNK_AT(n, d / 8), vp0 + r * v_s1, 16);
            continue;
        }
#endif
        const int bytes = whole || (j <= j_hi && d < head_dim) ? 16 : 0;
#if PAGED
        long ki, vi;
        cache_rows(b, min(j, j_hi), hk, k_off, k_s0, k_s1, k_sh, v_off, v_s0, v_s1, v_sh, table, bt_off, bt_sb, bt_ss,
                   page_size, num_pages, &ki, &vi);
        __global const store_t *kp = Kc + ki, *vp = Vc + vi;
#else
        const long jc = min(j, j_hi);
        __global const store_t *kp = k_row0 + jc * k_s1, *vp = v_row0 + jc * v_s1;
#endif
        async_copy16(Kst + CHUNK_AT(n, d / 8), kp + d, bytes);
        async_copy16(Vst + CHUNK_AT(n, d / 8), vp + d, bytes);
    }
}

__kernel __attribute__((reqd_work_group_size(MMA_WARPS * 32, 1, 1)))
void decode_partial_mma(DECODE_PARTIAL_ARGS)
{
    DECODE_PARTIAL_UNPACK
    /* [warp][stage][K, V][key][RING_PITCH] */
    __local ushort ring[MMA_WARPS * ASYNC_STAGES * 2 * TILE_HALVES] __attribute__((aligned(16)));
    const int lid = get_local_id(0), w = lid / 32, lane = lid % 32, g = lane >> 2, t = lane & 3;
    const int n_rows = group * lq; /* rows of this KV head: (query head, position) pairs */
    int split, hk, r0, b, Hq, p_first, j_lo, j_hi;
    decode_group(16, row_blocks, group, lq, host_len, lens, lens_off, lens_s, l_max, split_keys, window_left, &split,
                 &hk, &r0, &b, &Hq, &p_first, &j_lo, &j_hi);
    const float qscale = decode_qscale(scale);

    /* Q's A fragments (rows g, g + 8; raw storage values) and what those rows see */
    __global const ushort *Qu = (__global const ushort *)Q;
    uint qf[KSTEPS][4];
    int row_lo[2], row_hi[2], row_pos[2];
    float slope[2];
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int row = r0 + g + 8 * hr, rr = min(row, n_rows - 1), h = hk * group + rr / lq;
        const long base = q_off + b * q_sb + (long)(rr % lq) * q_ss + h * q_sh;
        #pragma unroll
        for (int ks = 0; ks < KSTEPS; ks++)
            #pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int d = ks * 16 + hf * 8 + 2 * t;
                const uint lo = row < n_rows && d < head_dim ? Qu[base + d] : 0u;
                const uint hi = row < n_rows && d + 1 < head_dim ? Qu[base + d + 1] : 0u;
                qf[ks][hr + 2 * hf] = lo | hi << 16;
            }
        decode_row_view(row, j_hi, n_rows, lq, hk, group, p_first, b, window_left, alibi, alibi_off, alibi_sb,
                        alibi_sh, &row_lo[hr], &row_hi[hr], &row_pos[hr], &slope[hr]);
    }

    __local ushort *wring = ring + w * (ASYNC_STAGES * 2 * TILE_HALVES);
#define STAGE_K(st) (wring + (st) * 2 * TILE_HALVES)
#define STAGE_V(st) (STAGE_K(st) + TILE_HALVES)
#if PAGED
    __global const store_t *k_row0 = Kc, *v_row0 = Vc; /* unused: rows go through the block table */
#else
    __global const store_t *k_row0 = Kc + KV_ROW0(k);
    __global const store_t *v_row0 = Vc + KV_ROW0(v);
#endif
#define ISSUE_KEYS(whole, st, jt)                                                                                  \
    issue_keys(whole, STAGE_K(st), STAGE_V(st), jt, j_hi, lane, head_dim, b, hk, Kc, Vc, k_row0, v_row0, k_off, k_s0, \
               k_s1, k_sh, v_off, v_s0, v_s1, v_sh, table, bt_off, bt_sb, bt_ss, page_size, num_pages)
#define ISSUE(st, jt)                                                                                              \
    if ((jt) + MMA_KEYS - 1 <= j_hi && head_dim == HEAD_DIM_PAD)                                                   \
        ISSUE_KEYS(true, st, jt);                                                                                  \
    else if ((jt) <= j_hi)                                                                                         \
        ISSUE_KEYS(false, st, jt);                                                                                 \
    async_commit();

    /* step n of this warp (keys j_lo + 16 w + MMA_BATCH n) goes to stage n % ASYNC_STAGES */
    const int j_first = j_lo + w * MMA_KEYS;
    #pragma unroll
    for (int n = 0; n < ASYNC_STAGES - 1; n++) {
        ISSUE(n, j_first + n * MMA_BATCH)
    }
    /* the rows and chunks this lane addresses for ldmatrix in a stage: K as B fragments of two
     * n8 tiles (matrices: keys 0-7 / 8-15 by lane / 16, dims 0-7 / 8-15 by lane / 8 % 2, of
     * k step ks: chunk 2 ks + that), V transposed (keys 0-7 / 8-15 by lane / 8 % 2, dims 0-7 /
     * 8-15 by lane / 16, of n8 tile pair n2: chunk 2 n2 + that) */
    const int k_row = (lane >> 4) * 8 + (lane & 7), k_chunk = (lane >> 3) & 1;
    const int v_row = ((lane >> 3) & 1) * 8 + (lane & 7), v_chunk = lane >> 4;
    float acc[NT_O][4];
    #pragma unroll
    for (int nt = 0; nt < NT_O; nt++)
        #pragma unroll
        for (int e = 0; e < 4; e++)
            acc[nt][e] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    int stage = 0;
    for (int jt = j_first; jt <= j_hi; jt += MMA_BATCH) {
        warp_sync(); /* no lane still reads the stage refilled next (read in the previous step) */
        ISSUE(stage == 0 ? ASYNC_STAGES - 1 : stage - 1, jt + (ASYNC_STAGES - 1) * MMA_BATCH)
        async_wait_oldest();
        warp_sync(); /* this step's copies, by every lane, visible to the warp */
        const uint kst = (uint)(size_t)STAGE_K(stage), vst = (uint)(size_t)STAGE_V(stage);
        stage = stage == ASYNC_STAGES - 1 ? 0 : stage + 1;

        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        #pragma unroll
        for (int ks = 0; ks < KSTEPS; ks++) {
            uint kb[4];
            ldmatrix_x4(kb, kst + 2 * CHUNK_AT(k_row, 2 * ks + k_chunk));
            mma_16816(s[0], qf[ks], kb[0], kb[1]);
            mma_16816(s[1], qf[ks], kb[2], kb[3]);
        }
        /* logits and this step of the online softmax; s becomes p */
        float alpha[2];
        #pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float mx = m[hr];
            #pragma unroll
            for (int nt = 0; nt < 2; nt++)
                #pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int j = jt + nt * 8 + 2 * t + c;
                    const float x = fcl_logit(s[nt][2 * hr + c] * qscale, softcap, slope[hr], (float)(row_pos[hr] - j));
                    s[nt][2 * hr + c] = j >= row_lo[hr] && j <= row_hi[hr] ? x : -INFINITY;
                    mx = fmax(mx, s[nt][2 * hr + c]);
                }
            mx = quad_max(mx);
            alpha[hr] = mx == -INFINITY ? 1.0f : exp2_ftz(m[hr] - mx);
            float sum = 0.0f;
            #pragma unroll
            for (int nt = 0; nt < 2; nt++)
                #pragma unroll
                for (int c = 0; c < 2; c++) {
                    const float p = mx == -INFINITY ? 0.0f : exp2_ftz(s[nt][2 * hr + c] - mx);
                    s[nt][2 * hr + c] = p;
                    sum += p;
                }
            l[hr] = fma(l[hr], alpha[hr], sum);
            m[hr] = mx;
        }
        if (!warp_all(alpha[0] == 1.0f && alpha[1] == 1.0f)) /* some row's max moved */
            #pragma unroll
            for (int nt = 0; nt < NT_O; nt++)
                #pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[nt][e] *= alpha[e >> 1];
        const uint pa[4] = {pack_pair(s[0][0], s[0][1]), pack_pair(s[0][2], s[0][3]), pack_pair(s[1][0], s[1][1]),
                            pack_pair(s[1][2], s[1][3])};
        #pragma unroll
        for (int n2 = 0; n2 < NT_O / 2; n2++) {
            uint vb[4];
            ldmatrix_x4_trans(vb, vst + 2 * CHUNK_AT(v_row, 2 * n2 + v_chunk));
            mma_16816(acc[2 * n2], pa, vb[0], vb[1]);
            mma_16816(acc[2 * n2 + 1], pa, vb[2], vb[3]);
        }
    }
#undef ISSUE
#undef ISSUE_KEYS
#undef STAGE_V
#undef STAGE_K

#if DIRECT_OUT
    /* this warp's state into its ring (acc [16][HEAD_DIM_PAD], then m [16], l [16]: within its
     * stages, 64 * RING_PITCH bytes each), then per row and float4 of dims the warps' merge */
    __local float *mine = (__local float *)wring;
    warp_sync(); /* no lane still reads the last stage */
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const float lsum = quad_sum(l[hr]);
        const int r = g + 8 * hr;
        #pragma unroll
        for (int nt = 0; nt < NT_O; nt++)
            *(__local float2 *)(mine + r * HEAD_DIM_PAD + nt * 8 + 2 * t) =
                (float2)(acc[nt][2 * hr], acc[nt][2 * hr + 1]);
        if (t == 0) {
            mine[16 * HEAD_DIM_PAD + r] = m[hr];
            mine[16 * HEAD_DIM_PAD + 16 + r] = lsum;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = lid; i < 16 * HEAD_DIM_PAD / 4; i += MMA_WARPS * 32) {
        const int r = i / (HEAD_DIM_PAD / 4), c = i - r * (HEAD_DIM_PAD / 4), row = r0 + r;
        if (row >= n_rows)
            break;
        float mx = -INFINITY, lt = 0.0f;
        float4 o = (float4)(0.0f);
        for (int u = 0; u < MMA_WARPS; u++) {
            __local const float *st = (__local const float *)(ring + u * (ASYNC_STAGES * 2 * TILE_HALVES));
            if (st[16 * HEAD_DIM_PAD + 16 + r] > 0.0f)
                mx = fmax(mx, st[16 * HEAD_DIM_PAD + r]);
        }
        for (int u = 0; u < MMA_WARPS; u++) {
            __local const float *st = (__local const float *)(ring + u * (ASYNC_STAGES * 2 * TILE_HALVES));
            const float lu = st[16 * HEAD_DIM_PAD + 16 + r];
            if (lu > 0.0f) {
                const float f = exp2(st[16 * HEAD_DIM_PAD + r] - mx);
                lt = fma(lu, f, lt);
                o += ((__local const float4 *)(st + r * HEAD_DIM_PAD))[c] * f;
            }
        }
        const int h = hk * group + row / lq, pos = row % lq;
        store_out4(O, o_off + b * o_sb + (long)pos * o_ss + h * o_sh, 4 * c, head_dim, o, lt);
        if (write_lse && c == 0)
            LSE[lse_off + b * lse_sb + h * lse_sh + (long)pos * lse_ss] = fcl_row_lse(mx, lt);
    }
#else
    /* this warp's split state: slot split * MMA_WARPS + w of each of its rows */
    const int slots = n_splits * MMA_WARPS;
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const float lsum = quad_sum(l[hr]);
        const int row = r0 + g + 8 * hr;
        if (row < n_rows) {
            const long slot = (((long)b * Hq + hk * group + row / lq) * lq + row % lq) * slots + split * MMA_WARPS + w;
            __global float *st = part + slot * PART_LD;
            #pragma unroll
            for (int nt = 0; nt < NT_O; nt++)
                *(__global float2 *)(st + nt * 8 + 2 * t) = (float2)(acc[nt][2 * hr], acc[nt][2 * hr + 1]);
            if (t == 0) {
                st[HEAD_DIM_PAD] = m[hr];
                st[HEAD_DIM_PAD + 1] = lsum;
            }
        }
    }
#endif
}

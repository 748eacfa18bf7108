/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decode attention over a KV cache (flash-decoding), portable OpenCL C 1.2. Three kernels:
 *
 *  decode_mask_len  with a validity mask: len[b] = 1 + the last valid key of batch b (0 when
 *                   none), so the mask form runs like the device-length form.
 *  decode_partial   one work-group per (key split, KV head and row block, batch). The rows of
 *                   a KV head are its Hq / Hkv query heads times the Lq query positions (GQA
 *                   native: every K/V row is read once for all of them). The work-group is
 *                   TEAMS teams of TEAM work-items; a team takes one key at a time and each of
 *                   its items owns DIMS dims of it (DIMS / 8 chunks of 8 dims; on GPUs one
 *                   chunk, so a team reads a K or V row as TEAM coalesced 16-byte loads). Items
 *                   keep their dims of the block's query rows (pre-scaled) and of the output
 *                   accumulators in registers. The split's keys go in batches of TEAMS * KEYS:
 *                   each team reads its KEYS keys' K and V straight into registers (no local
 *                   staging; the next batch's K is read once this batch's dot products are
 *                   done, so that it arrives while this batch's softmax and p V run),
 *                   computes its partial dot products, and the team's partials meet in local
 *                   memory: barrier, then the owner of each row (item row % TEAM) sums them,
 *                   applies scale / softcap / ALiBi / visibility and takes the team's online
 *                   softmax step for the batch, writing p and the rescale factor; barrier, then
 *                   every item adds p * V for its own dims (no reduction). Two barriers per
 *                   batch (none when TEAM is 1, the CPU shape: one item per team owning every
 *                   dim, float8 arithmetic that the CPU compilers vectorise). With
 *                   TEAM_SHUFFLE (NVIDIA, or a device with subgroups of a size the host fixed:
 *                   a team is 2 to WARP_LANES lanes of one warp or subgroup) there is no
 *                   barrier in the batch loop either: the team sums its partials by recursive
 *                   halving through warp shuffles, each item then holds whole dot products and
 *                   runs the online softmax of its row for them (the row's maximum met by
 *                   shuffles; each item keeps the row sum of its own keys), and p and the
 *                   rescale factors reach the team's items through a double-buffered local
 *                   slot and a warp barrier; every team streams its keys at its own pace.
 *                   With ASYNC_STAGES (NVIDIA, compute capability >= 8.0) K and V are not read
 *                   into registers: each item copies its own chunks of the next
 *                   ASYNC_STAGES - 1 batches into a local ring with cp.async and waits for its
 *                   own copies only (it reads back nothing another item copied: no barrier),
 *                   so the bytes in flight no longer cost registers. At the end of the
 *                   split the teams' states (m, l, acc) are merged in local memory and the
 *                   split's unnormalised state (acc[D], m, l per row) goes to `part`; with
 *                   DIRECT_OUT (the plan has one split) the rows' O and LSE are written
 *                   instead, and decode_combine is not launched. Splits outside the visible
 *                   keys (past the length, before the window) read no K/V.
 *                   (attention_decode_keys.cl holds the three-phase partial kernel, for GPUs
 *                   without an asynchronous copy; attention_decode_cpu.cl the CPUs'.)
 *  decode_combine   one work-group per query row: COMBINE_LANES lanes of splits times
 *                   COMBINE_DL lanes of dims (float4s dl, dl + COMBINE_DL, ...); each lane
 *                   merges its splits' states (four splits' loads in flight), the lanes'
 *                   states are merged in local memory, and the row's O and LSE are written.
 *
 * Query t of Lq (batch b) sits at position p = len_b - Lq + t and sees keys j with
 * max(0, p - window_left) <= j <= p (and mask[b, j] > 0.5 in the mask form); len_b comes from
 * the host, from lens[b] (clamped to [0, L_max]) or from the mask. A row with no visible key
 * writes O = 0 and LSE = -inf. In the mask form the V of a key that no row sees is zeroed
 * before use (dropped slots may hold anything, NaN included).
 *
 * Specialisation (-D): FCL_DTYPE; HEAD_DIM_PAD; FULL_DIM (head_dim == HEAD_DIM_PAD: no chunk
 * lies past the head dim); DIMS (dims per work-item: 8 or a multiple,
 * dividing HEAD_DIM_PAD; TEAM = HEAD_DIM_PAD / DIMS); TEAMS; KEYS (keys per team and batch);
 * ROWS_WG (rows per work-group); WIDE (K/V rows read 8 elements at a time as 16-byte loads:
 * head_dim % 8 == 0 and every row start 16-byte aligned; else element by element); TEAM_SHUFFLE
 * (needs warp_nv.cl or subgroup.cl; TEAM a power of two <= WARP_LANES, ROWS_WG <= TEAM, ROWS_WG *
 * KEYS a power of two, the work-group a multiple of WARP_LANES); FCL_SUBGROUP_SIZE (common.cl);
 * LEN_DEVICE (len_b from `lens`, else the host length); ASYNC_STAGES (0, or 2 to 4 with WIDE and
 * warp_nv.cl); HAS_MASK; PAGED (K/V are pages [num_pages, page_size, Hkv, D] addressed through
 * the block table; else [B, L_max, Hkv, D]); HAS_SOFTCAP; HAS_ALIBI; COMBINE_LANES, COMBINE_DL
 * (divides HEAD_DIM_PAD / 4); DIRECT_OUT (one split: the partial kernels take O and LSE,
 * DECODE_OUT_ARGS, and write them). Scores are kept in log2 units.
 */

#define TEAM (HEAD_DIM_PAD / DIMS)         /* work-items per team */
#define CH (DIMS / 8)                      /* 8-dim chunks per work-item */
#define WG_SIZE (TEAM * TEAMS)
#define BATCH (TEAMS * KEYS)               /* keys per work-group and batch */
#define OWN ((ROWS_WG + TEAM - 1) / TEAM)  /* rows whose softmax state one item owns */
#define PAIRS (ROWS_WG * KEYS)             /* (row, key) scores of a team and batch */
#if TEAM % 4 == 0
#define RED_LD (TEAM + 4)                  /* a pair's TEAM partials, float4-aligned, spread over banks */
#else
#define RED_LD (TEAM + 1)
#endif
#define TEAM_LD (PAIRS * RED_LD + 16)      /* a team's partials */
#define PART_LD (HEAD_DIM_PAD + 8)         /* one split state: acc[HEAD_DIM_PAD], m, l; 32-byte rows */
#define MERGE_TEAMS (TEAMS > 1 || (DIRECT_OUT && TEAM > 1)) /* rows' m and l meet in local memory */
#define C_PER (HEAD_DIM_PAD / 4 / COMBINE_DL) /* decode_combine: float4s of dims per dim lane */
#define C_WG (COMBINE_DL * COMBINE_LANES)     /* decode_combine's work-group */
#if TEAM > 1 /* GPU shape: short loops over private arrays, unrolled on GPUs (FCL_UNROLL_LOOP) */
#define UNROLL FCL_UNROLL_LOOP
#else        /* CPU shape: long loops, left to the compiler's vectoriser */
#define UNROLL
#endif
/* The CPU shape's loops over the rows of a step: unrolled, so their accumulators stay in registers. */
#define CPU_UNROLL _Pragma("unroll")
#if TEAM_SHUFFLE
#if TEAM > WARP_LANES || (TEAM & (TEAM - 1)) || ROWS_WG > TEAM || (PAIRS & (PAIRS - 1)) || WG_SIZE % WARP_LANES
#error "TEAM_SHUFFLE: TEAM a power of two <= WARP_LANES, ROWS_WG <= TEAM, ROWS_WG * KEYS a power of two, WG_SIZE % WARP_LANES == 0"
#endif
#define OWNP (PAIRS > TEAM ? PAIRS / TEAM : 1) /* pairs whose whole dot product one item gets */
#define LPP (TEAM > PAIRS ? TEAM / PAIRS : 1)  /* items that get the same pair */
#define ROW_ITEMS (KEYS / OWNP * LPP)          /* items that hold one row's keys */
#define XCH_LD ((PAIRS + ROWS_WG + 3) / 4 * 4) /* one exchange slot: p[PAIRS], rescale[ROWS_WG] */
#endif
#if ASYNC_STAGES
#if ASYNC_STAGES < 2 || ASYNC_STAGES > 4 || !WIDE
#error "ASYNC_STAGES: 2 to 4, with WIDE"
#endif
/* item lid's chunk c of key k's K (kv 0) or V (kv 1) in ring stage st: items side by side */
#define RING_AT(st, k, kv, c) (((((st) * KEYS + (k)) * 2 + (kv)) * CH + (c)) * WG_SIZE + lid)
#endif

#if FCL_DTYPE == 0
typedef float8 raw8; /* 8 elements as stored */
#else
typedef uint4 raw8;
#endif

/* Element index of row j (head hk) of sequence b in one cache, K or V (its offset and strides):
 * through the block table when PAGED, else contiguous. */
inline long cache_row(int b, int j, int hk, long off, long s0, long s1, long sh, __global const int *table, long bt_off,
                      long bt_sb, long bt_ss, int page_size, int num_pages)
{
#if PAGED
    const long page = clamp(table[bt_off + b * bt_sb + (long)(j / page_size) * bt_ss], 0, num_pages - 1);
    return off + page * s0 + (long)(j % page_size) * s1 + hk * sh;
#else
    return off + b * s0 + (long)j * s1 + hk * sh;
#endif
}

/* Element indices of row j (head hk) of sequence b's K and V. */
inline void cache_rows(int b, int j, int hk, long k_off, long k_s0, long k_s1, long k_sh, long v_off, long v_s0,
                       long v_s1, long v_sh, __global const int *table, long bt_off, long bt_sb, long bt_ss,
                       int page_size, int num_pages, long *ki, long *vi)
{
    *ki = cache_row(b, j, hk, k_off, k_s0, k_s1, k_sh, table, bt_off, bt_sb, bt_ss, page_size, num_pages);
    *vi = cache_row(b, j, hk, v_off, v_s0, v_s1, v_sh, table, bt_off, bt_sb, bt_ss, page_size, num_pages);
}

/* Inside a decode kernel: the element index of K's (kv k) or V's (kv v) row 0 of head hk of
 * sequence b in a contiguous cache, from which row j lies j * kv##_s1 on. */
#define KV_ROW0(kv) cache_row(b, 0, hk, kv##_off, kv##_s0, kv##_s1, kv##_sh, table, bt_off, bt_sb, bt_ss, page_size, num_pages)

/* 8 elements of a K or V row from element index i, whose first is dim d0: one 16-byte load
 * (two for f32) when WIDE, else element by element; dims >= head_dim read as 0. */
inline raw8 load_raw8(__global const store_t *p, long i, int d0, int head_dim)
{
#if WIDE
    if (!FULL_DIM && d0 >= head_dim) /* WIDE: head_dim % 8 == 0, so a chunk is all in or all out */
        return (raw8)(0);
#if FCL_DTYPE == 0
    __global const float4 *v = (__global const float4 *)(p + i);
    return (float8)(v[0], v[1]);
#else
    return *(__global const uint4 *)(p + i);
#endif
#elif FCL_DTYPE == 0
    float t[8];
    UNROLL
    for (int e = 0; e < 8; e++)
        t[e] = d0 + e < head_dim ? p[i + e] : 0.0f;
    return vload8(0, t);
#else
    ushort t[8];
    UNROLL
    for (int e = 0; e < 8; e++)
        t[e] = d0 + e < head_dim ? ((__global const ushort *)p)[i + e] : (ushort)0;
    return as_uint4(vload8(0, t));
#endif
}

/* The 8 stored elements as floats. */
inline float8 unpack8(raw8 x)
{
#if FCL_DTYPE == 0
    return x;
#elif FCL_DTYPE == 1
    return vload_half8(0, (const __private half *)&x);
#else
    const uint4 lo = x << 16, hi = x & (uint4)(0xffff0000u);
    return as_float8((uint8)(lo.x, hi.x, lo.y, hi.y, lo.z, hi.z, lo.w, hi.w));
#endif
}

/* 8 query elements from element index i (first dim d0) as floats; dims >= head_dim are 0. */
inline float8 load_q8(__global const store_t *Q, long i, int d0, int head_dim)
{
    float t[8];
    UNROLL
    for (int e = 0; e < 8; e++)
        t[e] = d0 + e < head_dim ? LOAD(Q, i + e) : 0.0f;
    return vload8(0, t);
}

/* acc + the dot product of a and b, as a chain of FMAs. */
inline float dot8_acc(float8 a, float8 b, float acc)
{
    acc = fma(a.s0, b.s0, acc);
    acc = fma(a.s1, b.s1, acc);
    acc = fma(a.s2, b.s2, acc);
    acc = fma(a.s3, b.s3, acc);
    acc = fma(a.s4, b.s4, acc);
    acc = fma(a.s5, b.s5, acc);
    acc = fma(a.s6, b.s6, acc);
    return fma(a.s7, b.s7, acc);
}

/* The sum of a float8's elements. */
inline float hsum8(float8 x)
{
    const float4 a = x.lo + x.hi;
    const float2 c = a.lo + a.hi;
    return c.x + c.y;
}

/* What block row `row` (of n_rows) of KV head hk sees: keys *lo .. *hi (none when *hi < *lo;
 * a row past n_rows sees none), within the split's keys up to j_hi; its position *pos and its
 * ALiBi slope *slope2 in log2 units (0 without ALiBi). */
inline void decode_row_view(int row, int j_hi, int n_rows, int lq, int hk, int group, int p_first, int b,
                            int window_left, __global const float *alibi, long alibi_off, long alibi_sb,
                            long alibi_sh, int *lo, int *hi, int *pos, float *slope2)
{
    const int rr = min(row, n_rows - 1), p = p_first + rr % lq;
#if HAS_ALIBI
    *slope2 = alibi[alibi_off + b * alibi_sb + (hk * group + rr / lq) * alibi_sh] * FCL_LOG2E;
#else
    *slope2 = 0.0f;
#endif
    *pos = p;
    *lo = window_left < 0 ? 0 : sub_sat(p, window_left);
    *hi = row < n_rows ? min(j_hi, p) : -1;
}

/* The logit (log2 units) of key j for a row whose view (decode_row_view) is lo, hi, pos, slope2,
 * from the dot product x of the pre-scaled query, or -inf when the key is not visible to it. */
inline float decode_logit_in_view(float x, int j, int lo, int hi, int pos, float slope2, float softcap, int b,
                                  int l_max, __global const float *mask, long mask_off, long mask_sb, long mask_ss)
{
    x = fcl_logit(x, softcap, slope2, (float)(pos - j));
    bool visible = j >= lo && j <= hi;
#if HAS_MASK
    visible = visible && mask[mask_off + b * mask_sb + (long)min(j, l_max - 1) * mask_ss] > 0.5f;
#endif
    return visible ? x : -INFINITY;
}

/* The logit (log2 units) of block row `row` (of n_rows) and key j from the dot product of the
 * pre-scaled query, or -inf when the key is not visible to that row. */
inline float decode_logit(float x, int row, int j, int j_hi, int n_rows, int lq, int hk, int group, int p_first,
                          int b, int window_left, float softcap, int l_max,
                          __global const float *mask, long mask_off, long mask_sb, long mask_ss,
                          __global const float *alibi, long alibi_off, long alibi_sb, long alibi_sh)
{
    int lo, hi, p;
    float slope2;
    decode_row_view(row, j_hi, n_rows, lq, hk, group, p_first, b, window_left, alibi, alibi_off, alibi_sb, alibi_sh,
                    &lo, &hi, &p, &slope2);
    return decode_logit_in_view(x, j, lo, hi, p, slope2, softcap, b, l_max, mask, mask_off, mask_sb, mask_ss);
}

/* What a partial kernel's work-group takes (grid: splits x work-group, KV heads x row_blocks
 * blocks of rows_wg rows, B): its split, KV head *hk, first block row *r0 and batch *b; the
 * query heads *Hq; the keys *j_lo .. *j_hi of the split that some row of the block can see
 * (none when *j_hi < *j_lo: up to the length, from the first query's window on) and the first
 * query's position *p_first. The length is the host's, or lens[b] clamped to [0, l_max]. */
inline void decode_group(int rows_wg, int row_blocks, int group, int lq, int host_len, __global const int *lens,
                         long lens_off, long lens_s, int l_max, int split_keys, int window_left, int *split, int *hk,
                         int *r0, int *b, int *Hq, int *p_first, int *j_lo, int *j_hi)
{
    *split = get_group_id(0);
    *hk = get_group_id(1) / row_blocks;
    *r0 = (get_group_id(1) % row_blocks) * rows_wg;
    *b = get_group_id(2);
    *Hq = get_num_groups(1) / row_blocks * group;
#if LEN_DEVICE
    const int len = clamp(lens[lens_off + *b * lens_s], 0, l_max);
#else
    const int len = host_len;
#endif
    *p_first = len - lq;
    *j_lo = max(*split * split_keys, 0);
    *j_hi = min((*split + 1) * split_keys, len) - 1;
    if (window_left >= 0)
        *j_lo = max(*j_lo, sub_sat(*p_first, window_left));
}

/* The factor on the query rows: the scale, times log2(e) where no logit modifier takes scores to
 * log2 units later (fcl_logit), so that every score is in log2 units. */
inline float decode_qscale(float scale)
{
#if HAS_LOGIT_MODS
    return scale;
#else
    return scale * FCL_LOG2E;
#endif
}

/* One row's online-softmax step over a batch: logits s[KEYS] become p[KEYS] relative to the
 * new running max *m; *l is rescaled and grows by the p's. Returns the rescale factor. */
inline float softmax_step(float *s, float *m, float *l)
{
    float mx = *m;
    UNROLL
    for (int k = 0; k < KEYS; k++)
        mx = fmax(mx, s[k]);
    const float alpha = mx == -INFINITY ? 1.0f : exp2(*m - mx);
    float sum = *l * alpha;
    UNROLL
    for (int k = 0; k < KEYS; k++) {
        s[k] = mx == -INFINITY ? 0.0f : exp2(s[k] - mx);
        sum += s[k];
    }
    *m = mx;
    *l = sum;
    return alpha;
}

#if TEAM > 1
/* The sum of a pair's TEAM partial dot products in local memory. */
inline float team_sum(__local const float *x)
{
#if TEAM % 4 == 0
    __local const float4 *x4 = (__local const float4 *)x;
    float4 s = x4[0];
    UNROLL
    for (int i = 1; i < TEAM / 4; i++)
        s += x4[i];
    return (s.x + s.y) + (s.z + s.w);
#else
    float s = x[0];
    UNROLL
    for (int i = 1; i < TEAM; i++)
        s += x[i];
    return s;
#endif
}
#endif

#if TEAM_SHUFFLE
/* The sums over the team's TEAM items of their partial dot products v[PAIRS] (pair = row *
 * KEYS + key), by recursive halving over warp shuffles: item `lane` ends with v[0 .. OWNP - 1]
 * = the sums of pairs lane / LPP * OWNP + 0 .. OWNP - 1. */
__attribute__((always_inline)) inline void team_reduce(float *v, int lane)
{
    int n = PAIRS;
    UNROLL
    for (int o = TEAM / 2; o >= 1; o /= 2) {
        if (n > OWNP) { /* keep one half (by bit o of the lane), send the other to lane ^ o */
            const int h = n / 2;
            const bool up = (lane & o) != 0;
            UNROLL
            for (int i = 0; i < h; i++) {
                const float lo = v[i], hi = v[i + h], keep = up ? hi : lo, send = up ? lo : hi;
                v[i] = keep + shuffle_xor(send, o);
            }
            n = h;
        } else {
            v[0] += shuffle_xor(v[0], o);
        }
    }
}
#endif

#if ASYNC_STAGES
/* One raw8 (16 bytes; 32 for f32) from src into dst asynchronously; zeros when !in. */
inline void async_raw8(__local raw8 *dst, __global const store_t *src, bool in)
{
    async_copy16(dst, src, in ? 16 : 0);
#if FCL_DTYPE == 0
    async_copy16((__local float4 *)dst + 1, src + 4, in ? 16 : 0);
#endif
}

/* Waits until this item's copies of all but its newest ASYNC_STAGES - 1 groups have landed:
 * the oldest of the ASYNC_STAGES batches in flight. */
inline void async_wait_oldest(void)
{
#if ASYNC_STAGES == 2
    __asm__ __volatile__("cp.async.wait_group 1;" ::: "memory");
#elif ASYNC_STAGES == 3
    __asm__ __volatile__("cp.async.wait_group 2;" ::: "memory");
#else
    __asm__ __volatile__("cp.async.wait_group 3;" ::: "memory");
#endif
}

/* This item's first chunk of K and V row j (clamped to j_hi): through the block table when
 * PAGED, else from the rows of key 0 (k_row0, v_row0: one multiply-add per row). */
#if PAGED
#define ITEM_ROWS(j, kp, vp)                                                                                     \
    {                                                                                                            \
        long ki, vi;                                                                                             \
        cache_rows(b, min(j, j_hi), hk, k_off, k_s0, k_s1, k_sh, v_off, v_s0, v_s1, v_sh, table, bt_off, bt_sb, \
                   bt_ss, page_size, num_pages, &ki, &vi);                                                       \
        kp = Kc + ki + lane * 8;                                                                                 \
        vp = Vc + vi + lane * 8;                                                                                 \
    }
#else
#define ITEM_ROWS(j, kp, vp)                                                                                     \
    {                                                                                                            \
        const long jc = min(j, j_hi);                                                                            \
        kp = k_row0 + jc * k_s1;                                                                                 \
        vp = v_row0 + jc * v_s1;                                                                                 \
    }
#endif

/* Starts the copies of this item's chunks of the team's KEYS keys from key jt on (K and V) into
 * ring stage `stage` (keys past j_hi: zeros), and closes them into one group; a batch whose
 * first key jb is past j_hi copies nothing (the group is empty). */
#define COPY_KEYS(stage, jb, jt)                                                                                 \
    if ((jb) <= j_hi) {                                                                                          \
        UNROLL                                                                                                   \
        for (int k = 0; k < KEYS; k++) {                                                                         \
            const int j = (jt) + k;                                                                              \
            __global const store_t *kp, *vp;                                                                     \
            ITEM_ROWS(j, kp, vp)                                                                                 \
            UNROLL                                                                                               \
            for (int c = 0; c < CH; c++) {                                                                       \
                const bool in = j <= j_hi && (lane + c * TEAM) * 8 < head_dim;                                   \
                async_raw8(&ring[RING_AT(stage, k, 0, c)], kp + c * TEAM * 8, in);                               \
                async_raw8(&ring[RING_AT(stage, k, 1, c)], vp + c * TEAM * 8, in);                               \
            }                                                                                                    \
        }                                                                                                        \
    }                                                                                                            \
    async_commit();
#endif

/* Reads into dst[KEYS][CH] the chunks of the team's KEYS keys from key jt on, of K (src Kc,
 * index ki) or V (src Vc, index vi); keys past j_hi read as 0. */
#define LOAD_KEYS(dst, src, idx, jt)                                                                            \
    UNROLL                                                                                                      \
    for (int k = 0; k < KEYS; k++) {                                                                            \
        const int j = (jt) + k;                                                                                 \
        long ki, vi;                                                                                            \
        cache_rows(b, min(j, j_hi), hk, k_off, k_s0, k_s1, k_sh, v_off, v_s0, v_s1, v_sh, table, bt_off,       \
                   bt_sb, bt_ss, page_size, num_pages, &ki, &vi);                                               \
        UNROLL                                                                                                  \
        for (int c = 0; c < CH; c++) {                                                                          \
            const int d0 = (lane + c * TEAM) * 8;                                                               \
            dst[k][c] = j <= j_hi ? load_raw8(src, idx + d0, d0, head_dim) : (raw8)(0);                         \
        }                                                                                                       \
    }

/* Dims d .. d + 3 (those below head_dim) of the output row at element index i: x / l, zeros
 * for a row that saw no key (l = 0). */
inline void store_out4(__global store_t *O, long i, int d, int head_dim, float4 x, float l)
{
    const float xs[4] = {x.x, x.y, x.z, x.w};
    UNROLL
    for (int e = 0; e < 4; e++)
        if (d + e < head_dim)
            STORE(O, i + d + e, l > 0.0f ? xs[e] / l : 0.0f);
}

__kernel void decode_mask_len(__global const float *mask, __global int *lens, const int l_max,
                              const long mask_off, const long mask_sb, const long mask_ss)
{
    __local int last[WG_SIZE];
    const int lid = get_local_id(0), b = get_group_id(1);
    int mine = -1;
    for (int j = lid; j < l_max; j += WG_SIZE)
        if (mask[mask_off + b * mask_sb + (long)j * mask_ss] > 0.5f)
            mine = j;
    last[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        int best = -1;
        for (int i = 0; i < WG_SIZE; i++)
            best = max(best, last[i]);
        lens[b] = best + 1;
    }
}

/* The arguments of the partial kernels (decode_partial; decode_partial_mma in
 * attention_decode_mma.cl): the buffers, then the scalars packed into vectors (NVIDIA's enqueue
 * costs about 60 ns per argument: perf.md v0.16.0-dev), named by DECODE_PARTIAL_UNPACK at the
 * top of the kernel. */
#define DECODE_PARTIAL_ARGS                                                                                     \
    __global const store_t *Q, __global const store_t *Kc, __global const store_t *Vc, __global const int *lens, \
        __global const float *mask, __global const int *table, __global const float *alibi, __global float *part, \
        const int16 ia, const long16 la, const long8 lb DECODE_OUT_ARGS
#define DECODE_PARTIAL_UNPACK                                                                                   \
    const int host_len = ia.s0, lq = ia.s1, group = ia.s2, head_dim = ia.s3, l_max = ia.s4, split_keys = ia.s5, \
              n_splits = ia.s6, window_left = ia.s7, page_size = ia.s8, num_pages = ia.s9, row_blocks = ia.sa;  \
    const float scale = as_float(ia.sb), softcap = as_float(ia.sc);                                              \
    const long q_off = la.s0, q_sb = la.s1, q_ss = la.s2, q_sh = la.s3, k_off = la.s4, k_s0 = la.s5,            \
               k_s1 = la.s6, k_sh = la.s7, v_off = la.s8, v_s0 = la.s9, v_s1 = la.sa, v_sh = la.sb,             \
               mask_off = la.sc, mask_sb = la.sd, mask_ss = la.se, bt_off = la.sf;                               \
    const long bt_sb = lb.s0, bt_ss = lb.s1, alibi_off = lb.s2, alibi_sb = lb.s3, alibi_sh = lb.s4,            \
               lens_off = lb.s5, lens_s = lb.s6;                                                                \
    DIRECT_OUT_UNPACK
/* The output's arguments (decode_combine's; the partial kernels' with DIRECT_OUT): O [B, Lq, Hq,
 * D] and LSE [B, Hq, Lq], their offsets and strides packed, named by OUT_UNPACK */
#define OUT_ARGS __global store_t *O, __global float *LSE, const long8 oa
#define OUT_UNPACK                                                                                              \
    const long o_off = oa.s0, o_sb = oa.s1, o_ss = oa.s2, o_sh = oa.s3, lse_off = oa.s4, lse_sb = oa.s5,        \
               lse_sh = oa.s6, lse_ss = oa.s7;
#if DIRECT_OUT /* and write_lse: ia.sd */
#define DECODE_OUT_ARGS , OUT_ARGS
#define DIRECT_OUT_UNPACK                                                                                       \
    OUT_UNPACK                                                                                                  \
    const int write_lse = ia.sd;
#else
#define DECODE_OUT_ARGS
#define DIRECT_OUT_UNPACK
#endif

#if TEAMS > 1
/* The teams' accumulators acc[ROWS_WG][CH] of all teams but the last added into out8 (the block's
 * rows, HEAD_DIM_PAD / 8 float8s each), team by team; barriers inside: every item of the
 * work-group calls it. The last team then adds its own (decode_store_row). */
inline void decode_merge_teams(__local float8 *out8, float8 acc[ROWS_WG][CH], int team, int lane)
{
    for (int t = 0; t < TEAMS - 1; t++) { /* one barrier site: not unrolled */
        if (team == t)
            UNROLL
            for (int r = 0; r < ROWS_WG; r++)
                UNROLL
                for (int c = 0; c < CH; c++) {
                    const int i = r * (HEAD_DIM_PAD / 8) + lane + c * TEAM;
                    out8[i] = t == 0 ? acc[r][c] : out8[i] + acc[r][c];
                }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
#endif

/* Where a partial kernel's rows go: with DIRECT_OUT the output (O, LSE and their offsets and
 * strides, write_lse), else the split states (part, n_splits, split, Hq). */
#if DIRECT_OUT
#define ROW_OUT_PARAMS                                                                                          \
    __global store_t *O, __global float *LSE, long o_off, long o_sb, long o_ss, long o_sh, long lse_off,      \
        long lse_sb, long lse_sh, long lse_ss, int write_lse
#define ROW_OUT_ARGS O, LSE, o_off, o_sb, o_ss, o_sh, lse_off, lse_sb, lse_sh, lse_ss, write_lse
#else
#define ROW_OUT_PARAMS __global float *part, int n_splits, int split, int Hq
#define ROW_OUT_ARGS part, n_splits, split, Hq
#endif

/* Block row `row` (< n_rows; query head hk * group + row / lq, position row % lq, batch b): this
 * item's chunks acc_r[CH] (chunk c at dims (lane + c * TEAM) * 8), plus with TEAMS > 1 the
 * merged teams' row in out8; with write_ml also the row's max m and sum l. DIRECT_OUT: the row's
 * O = x / l and LSE; else its split state part[slot] = (acc[HEAD_DIM_PAD], m, l). */
inline void decode_store_row(ROW_OUT_PARAMS, int row, int r, int hk, int group, int lq, int b, int lane,
                             int head_dim, const float8 *acc_r, __local const float8 *out8, float m, float l,
                             bool write_ml)
{
#if DIRECT_OUT
    const int h = hk * group + row / lq, pos = row % lq;
    const long oi = o_off + b * o_sb + (long)pos * o_ss + h * o_sh;
#else
    const long slot = (((long)b * Hq + hk * group + row / lq) * lq + row % lq) * n_splits + split;
#endif
    UNROLL
    for (int c = 0; c < CH; c++) {
        float8 x = acc_r[c];
#if TEAMS > 1
        x += out8[r * (HEAD_DIM_PAD / 8) + lane + c * TEAM];
#endif
#if DIRECT_OUT
        const int d0 = (lane + c * TEAM) * 8;
        store_out4(O, oi, d0, head_dim, x.lo, l);
        store_out4(O, oi, d0 + 4, head_dim, x.hi, l);
#else
        ((__global float8 *)(part + slot * PART_LD))[lane + c * TEAM] = x;
#endif
    }
    if (write_ml) {
#if DIRECT_OUT
        if (write_lse)
            LSE[lse_off + b * lse_sb + h * lse_sh + (long)pos * lse_ss] = fcl_row_lse(m, l);
#else
        part[slot * PART_LD + HEAD_DIM_PAD] = m;
        part[slot * PART_LD + HEAD_DIM_PAD + 1] = l;
#endif
    }
}

#if !DECODE_MMA && !DECODE_CPU && !DECODE_KEYS /* the tensor-core, CPU and three-phase programs have
                                                  * their own partial kernels */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) FCL_SUBGROUP_ATTR
void decode_partial(DECODE_PARTIAL_ARGS)
{
    DECODE_PARTIAL_UNPACK
#if ASYNC_STAGES
    __local raw8 ring[ASYNC_STAGES * KEYS * 2 * CH * WG_SIZE];
#endif
#if TEAM_SHUFFLE
    __local float xch[TEAMS * 2 * XCH_LD] __attribute__((aligned(16))); /* [team][parity]: p, rescale */
#elif TEAM > 1
    __local float4 red4[TEAMS * TEAM_LD / 4]; /* partial dot products [team][row * KEYS + key][lane] */
    __local float *red = (__local float *)red4;
    __local float p_s[TEAMS * PAIRS], alpha_s[TEAMS * ROWS_WG];
#endif
#if MERGE_TEAMS
    __local float m_t[TEAMS * ROWS_WG], l_t[TEAMS * ROWS_WG];
#endif
#if TEAMS > 1
    __local float8 out8[ROWS_WG * HEAD_DIM_PAD / 8];
#endif
    const int lid = get_local_id(0), team = lid / TEAM, lane = lid - team * TEAM;
    const int n_rows = group * lq; /* rows of this KV head: (query head, position) pairs */
    int split, hk, r0, b, Hq, p_first, j_lo, j_hi;
    decode_group(ROWS_WG, row_blocks, group, lq, host_len, lens, lens_off, lens_s, l_max, split_keys, window_left,
                 &split, &hk, &r0, &b, &Hq, &p_first, &j_lo, &j_hi);

    const float qscale = decode_qscale(scale);
    /* this item's dims (chunks lane, lane + TEAM, ...) of the block's query rows and outputs */
    float8 q[ROWS_WG][CH], acc[ROWS_WG][CH];
    UNROLL
    for (int r = 0; r < ROWS_WG; r++) {
        const int row = min(r0 + r, n_rows - 1), h = hk * group + row / lq, t = row % lq;
        UNROLL
        for (int c = 0; c < CH; c++) {
            const int d0 = (lane + c * TEAM) * 8;
            q[r][c] = load_q8(Q, q_off + b * q_sb + (long)t * q_ss + h * q_sh + d0, d0, head_dim) * qscale;
            acc[r][c] = (float8)(0.0f);
        }
    }
#if TEAM_SHUFFLE
    /* the running max of this item's row and the sum of its own keys' p's */
    float m_lane = -INFINITY, l_lane = 0.0f;
    int parity = 0;
#else
    float m_own[OWN], l_own[OWN]; /* the team's softmax state of rows lane, lane + TEAM, ... */
    UNROLL
    for (int o = 0; o < OWN; o++) {
        m_own[o] = -INFINITY;
        l_own[o] = 0.0f;
    }
#endif

    /* K of a batch is read as soon as the previous batch's dot products free its registers, so
     * it arrives during that batch's softmax and p V; V is read at the start of its batch */
#if ASYNC_STAGES
#if !PAGED
    __global const store_t *k_row0 = Kc + KV_ROW0(k) + lane * 8;
    __global const store_t *v_row0 = Vc + KV_ROW0(v) + lane * 8;
#endif
    /* the first ASYNC_STAGES - 1 batches in flight; batch n goes to stage n % ASYNC_STAGES */
    UNROLL
    for (int n = 0; n < ASYNC_STAGES - 1; n++) {
        COPY_KEYS(n, j_lo + n * BATCH, j_lo + n * BATCH + team * KEYS)
    }
    int stage = 0;
#else
    raw8 kr[KEYS][CH];
    LOAD_KEYS(kr, Kc, ki, j_lo + team * KEYS)
#endif
    for (int jb = j_lo; jb <= j_hi; jb += BATCH) {
        const int jt = jb + team * KEYS; /* this team's first key */
        raw8 vr[KEYS][CH];
#if ASYNC_STAGES
        /* the stage read in the previous batch (by this item only) takes the batch
         * ASYNC_STAGES - 1 ahead; then this batch's copies are awaited */
        {
            const int ahead = (ASYNC_STAGES - 1) * BATCH, next = stage == 0 ? ASYNC_STAGES - 1 : stage - 1;
            COPY_KEYS(next, jb + ahead, jt + ahead)
        }
        async_wait_oldest();
        raw8 kr[KEYS][CH];
        UNROLL
        for (int k = 0; k < KEYS; k++)
            UNROLL
            for (int c = 0; c < CH; c++)
                kr[k][c] = ring[RING_AT(stage, k, 0, c)];
#else
        LOAD_KEYS(vr, Vc, vi, jt)
#endif
        /* partial (TEAM > 1) or whole dot products of this item's dims */
        float s[ROWS_WG][KEYS];
#if TEAM > 1 /* few chunks: one chain of scalar FMAs (8 per chunk) per row */
        UNROLL
        for (int k = 0; k < KEYS; k++) {
            float8 kf[CH];
            UNROLL
            for (int c = 0; c < CH; c++)
                kf[c] = unpack8(kr[k][c]);
            UNROLL
            for (int r = 0; r < ROWS_WG; r++) {
                float x = 0.0f;
                UNROLL
                for (int c = 0; c < CH; c++)
                    x = dot8_acc(q[r][c], kf[c], x);
                s[r][k] = x;
            }
        }
#else /* many chunks (CH even): float8 FMAs, two chains per row over the even and odd chunks so
       * that 2 x ROWS_WG independent chains hide the FMA latency, summed at the end */
        for (int k = 0; k < KEYS; k++) {
            float8 x0[ROWS_WG], x1[ROWS_WG];
            CPU_UNROLL
            for (int r = 0; r < ROWS_WG; r++)
                x0[r] = x1[r] = (float8)(0.0f);
            for (int c = 0; c < CH; c += 2) {
                const float8 k0 = unpack8(kr[k][c]), k1 = unpack8(kr[k][c + 1]);
                CPU_UNROLL
                for (int r = 0; r < ROWS_WG; r++) {
                    x0[r] = fma(q[r][c], k0, x0[r]);
                    x1[r] = fma(q[r][c + 1], k1, x1[r]);
                }
            }
            CPU_UNROLL
            for (int r = 0; r < ROWS_WG; r++)
                s[r][k] = hsum8(x0[r] + x1[r]);
        }
#endif
#if ASYNC_STAGES
        UNROLL
        for (int k = 0; k < KEYS; k++)
            UNROLL
            for (int c = 0; c < CH; c++)
                vr[k][c] = ring[RING_AT(stage, k, 1, c)];
        stage = stage == ASYNC_STAGES - 1 ? 0 : stage + 1;
#else
        LOAD_KEYS(kr, Kc, ki, jt + BATCH) /* the next batch's K */
#endif
        float alpha[ROWS_WG];
#if TEAM_SHUFFLE
        float v[PAIRS];
        UNROLL
        for (int r = 0; r < ROWS_WG; r++)
            UNROLL
            for (int k = 0; k < KEYS; k++)
                v[r * KEYS + k] = s[r][k];
        team_reduce(v, lane);
        const int p0 = lane / LPP * OWNP, my_row = p0 / KEYS, my_key = p0 % KEYS;
        float mx = m_lane;
        UNROLL
        for (int i = 0; i < OWNP; i++) {
            v[i] = decode_logit(v[i], r0 + my_row, jt + my_key + i, j_hi, n_rows, lq, hk, group, p_first, b,
                                window_left, softcap, l_max, mask, mask_off, mask_sb, mask_ss, alibi, alibi_off,
                                alibi_sb, alibi_sh);
            mx = fmax(mx, v[i]);
        }
        UNROLL
        for (int o = LPP; o < ROW_ITEMS; o *= 2) /* the row's max over its items */
            mx = fmax(mx, shuffle_xor(mx, o));
        const float a = mx == -INFINITY ? 1.0f : exp2_ftz(m_lane - mx);
        __local float *x = xch + (team * 2 + parity) * XCH_LD;
        l_lane *= a;
        UNROLL
        for (int i = 0; i < OWNP; i++) {
            v[i] = mx == -INFINITY ? 0.0f : exp2_ftz(v[i] - mx);
            l_lane += v[i];
            if (lane % LPP == 0)
                x[p0 + i] = v[i];
        }
        m_lane = mx;
        if (lane % ROW_ITEMS == 0)
            x[PAIRS + my_row] = a;
        warp_sync(); /* the slot is rewritten two batches on, after the next batch's warp_sync */
        parity ^= 1;
        UNROLL
        for (int r = 0; r < ROWS_WG; r++) {
            alpha[r] = x[PAIRS + r];
            UNROLL
            for (int k = 0; k < KEYS; k++)
                s[r][k] = x[r * KEYS + k];
        }
#elif TEAM > 1
        UNROLL
        for (int r = 0; r < ROWS_WG; r++)
            UNROLL
            for (int k = 0; k < KEYS; k++)
                red[team * TEAM_LD + (r * KEYS + k) * RED_LD + lane] = s[r][k];
        barrier(CLK_LOCAL_MEM_FENCE);
        UNROLL
        for (int o = 0; o < OWN; o++) { /* the owner of row r sums the team's partials */
            const int r = lane + o * TEAM;
            if (r < ROWS_WG) {
                float x[KEYS];
                UNROLL
                for (int k = 0; k < KEYS; k++)
                    x[k] = decode_logit(team_sum(red + team * TEAM_LD + (r * KEYS + k) * RED_LD), r0 + r, jt + k, j_hi,
                                        n_rows, lq, hk, group, p_first, b, window_left, softcap, l_max, mask, mask_off,
                                        mask_sb, mask_ss, alibi, alibi_off, alibi_sb, alibi_sh);
                alpha_s[team * ROWS_WG + r] = softmax_step(x, &m_own[o], &l_own[o]);
                UNROLL
                for (int k = 0; k < KEYS; k++)
                    p_s[team * PAIRS + r * KEYS + k] = x[k];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        UNROLL
        for (int r = 0; r < ROWS_WG; r++) {
            alpha[r] = alpha_s[team * ROWS_WG + r];
            UNROLL
            for (int k = 0; k < KEYS; k++)
                s[r][k] = p_s[team * PAIRS + r * KEYS + k];
        }
#else
        UNROLL
        for (int r = 0; r < ROWS_WG; r++) { /* one item per team: it owns every row */
            UNROLL
            for (int k = 0; k < KEYS; k++)
                s[r][k] = decode_logit(s[r][k], r0 + r, jt + k, j_hi, n_rows, lq, hk, group, p_first, b,
                                       window_left, softcap, l_max, mask, mask_off, mask_sb, mask_ss, alibi,
                                       alibi_off, alibi_sb, alibi_sh);
            alpha[r] = softmax_step(s[r], &m_own[r], &l_own[r]);
        }
#endif
        /* acc = acc * alpha + p V over this item's dims */
#if TEAM_SHUFFLE /* skipped when no row's max moved in this warp (the common case) */
        bool same = true;
        UNROLL
        for (int r = 0; r < ROWS_WG; r++)
            same = same && alpha[r] == 1.0f;
        if (!warp_all(same))
#endif
        UNROLL
        for (int r = 0; r < ROWS_WG; r++)
            UNROLL
            for (int c = 0; c < CH; c++)
                acc[r][c] *= alpha[r];
#if HAS_MASK
        float live[KEYS]; /* some row sees key k: its V is a valid row */
        UNROLL
        for (int k = 0; k < KEYS; k++) {
            live[k] = 0.0f;
            UNROLL
            for (int r = 0; r < ROWS_WG; r++)
                live[k] = fmax(live[k], s[r][k]);
        }
#define V_CHUNK(k, c) (live[k] > 0.0f ? unpack8(vr[k][c]) : (float8)(0.0f))
#else
#define V_CHUNK(k, c) unpack8(vr[k][c])
#endif
#if TEAM > 1
        UNROLL
        for (int k = 0; k < KEYS; k++)
            UNROLL
            for (int c = 0; c < CH; c++) {
                const float8 vf = V_CHUNK(k, c);
                UNROLL
                for (int r = 0; r < ROWS_WG; r++)
                    acc[r][c] = fma((float8)(s[r][k]), vf, acc[r][c]);
            }
#else /* a chunk's rows stay in registers while the batch's keys stream by, in two chains per
       * row (even and odd keys) */
        for (int c = 0; c < CH; c++) {
            float8 a0[ROWS_WG], a1[ROWS_WG];
            CPU_UNROLL
            for (int r = 0; r < ROWS_WG; r++) {
                a0[r] = acc[r][c];
                a1[r] = (float8)(0.0f);
            }
            int k = 0;
            for (; k + 1 < KEYS; k += 2) {
                const float8 v0 = V_CHUNK(k, c), v1 = V_CHUNK(k + 1, c);
                CPU_UNROLL
                for (int r = 0; r < ROWS_WG; r++) {
                    a0[r] = fma((float8)(s[r][k]), v0, a0[r]);
                    a1[r] = fma((float8)(s[r][k + 1]), v1, a1[r]);
                }
            }
            if (k < KEYS) {
                const float8 v0 = V_CHUNK(k, c);
                CPU_UNROLL
                for (int r = 0; r < ROWS_WG; r++)
                    a0[r] = fma((float8)(s[r][k]), v0, a0[r]);
            }
            CPU_UNROLL
            for (int r = 0; r < ROWS_WG; r++)
                acc[r][c] = a0[r] + a1[r];
        }
#endif
#undef V_CHUNK
    }

#if TEAM_SHUFFLE
    /* row r's state to item r of the team (OWN is 1): l summed over the row's items */
    UNROLL
    for (int o = LPP; o < ROW_ITEMS; o *= 2)
        l_lane += shuffle_xor(l_lane, o);
    const int src = lid % WARP_LANES - lane + min(lane, ROWS_WG - 1) * ROW_ITEMS;
    const float m_own[1] = {shuffle_idx(m_lane, src)}, l_own[1] = {shuffle_idx(l_lane, src)};
#endif
    /* The split's state: part[((b * Hq + h) * lq + t) * n_splits + split] = acc[HDP], m, l; with
     * DIRECT_OUT the rows' O and LSE. */
#if MERGE_TEAMS
    /* merge the teams: rescale each to the block max, then sum the accumulators team by team
     * (with one team, its rows' m and l reach every item) */
    UNROLL
    for (int o = 0; o < OWN; o++) {
        const int r = lane + o * TEAM;
        if (r < ROWS_WG) {
            m_t[team * ROWS_WG + r] = m_own[o];
            l_t[team * ROWS_WG + r] = l_own[o];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float m_row[ROWS_WG];
    UNROLL
    for (int r = 0; r < ROWS_WG; r++) {
        float mx = -INFINITY;
        for (int t = 0; t < TEAMS; t++)
            mx = fmax(mx, m_t[t * ROWS_WG + r]);
        const float mine = m_t[team * ROWS_WG + r], f = mine == -INFINITY ? 0.0f : exp2(mine - mx);
        UNROLL
        for (int c = 0; c < CH; c++)
            acc[r][c] *= f;
        m_row[r] = mx;
    }
#endif
#if TEAMS > 1
    decode_merge_teams(out8, acc, team, lane);
    if (team == TEAMS - 1)
#else
    __local const float8 *out8 = NULL;
#endif
    {
        UNROLL
        for (int r = 0; r < ROWS_WG; r++) {
            const int row = r0 + r;
            if (row >= n_rows)
                break;
#if MERGE_TEAMS
            const float m = m_row[r];
            float l = 0.0f;
            for (int t = 0; t < TEAMS; t++) {
                const float mt = m_t[t * ROWS_WG + r];
                l += mt == -INFINITY ? 0.0f : l_t[t * ROWS_WG + r] * exp2(mt - m);
            }
#else
            const float m = m_own[r / TEAM], l = l_own[r / TEAM]; /* item r % TEAM's */
#endif
            decode_store_row(ROW_OUT_ARGS, row, r, hk, group, lq, b, lane, head_dim, acc[r], out8, m, l, r % TEAM == lane);
        }
    }
}

#endif

__kernel __attribute__((reqd_work_group_size(C_WG, 1, 1)))
void decode_combine(__global const float *part, const int lq, const int Hq, const int head_dim, const int n_splits,
                    const int write_lse, OUT_ARGS)
{
    OUT_UNPACK
#if COMBINE_LANES > 1
    __local float4 o_s[COMBINE_LANES * HEAD_DIM_PAD / 4];
    __local float m_s[COMBINE_LANES], l_s[COMBINE_LANES];
#endif
    const int lid = get_local_id(0), sl = lid / COMBINE_DL, dl = lid - sl * COMBINE_DL;
    const int row = get_group_id(1); /* row = (b * Hq + h) * lq + t */
    const int b = row / (Hq * lq), h = (row / lq) % Hq, t = row % lq;
    __global const float *st = part + (long)row * n_splits * PART_LD;
    /* this lane's splits sl, sl + COMBINE_LANES, ... and float4s of dims dl, dl + COMBINE_DL, ...:
     * four splits' loads in flight, then an online merge of their states (empty splits, l = 0,
     * hold no state) */
    float m = -INFINITY, l = 0.0f;
    float4 o[C_PER];
    UNROLL
    for (int i = 0; i < C_PER; i++)
        o[i] = (float4)(0.0f);
    for (int s0 = sl; s0 < n_splits; s0 += 4 * COMBINE_LANES) {
        float ms[4], ls[4];
        float4 xs[4][C_PER];
        UNROLL
        for (int u = 0; u < 4; u++) {
            const int sp = s0 + u * COMBINE_LANES;
            __global const float *x = st + (long)min(sp, n_splits - 1) * PART_LD;
            ls[u] = sp < n_splits ? x[HEAD_DIM_PAD + 1] : 0.0f;
            ms[u] = x[HEAD_DIM_PAD];
            UNROLL
            for (int i = 0; i < C_PER; i++)
                xs[u][i] = ((__global const float4 *)x)[dl + i * COMBINE_DL];
        }
        UNROLL
        for (int u = 0; u < 4; u++)
            if (ls[u] > 0.0f) {
                const float mn = fmax(m, ms[u]), a = exp2(m - mn), w = exp2(ms[u] - mn);
                l = fma(ls[u], w, l * a);
                UNROLL
                for (int i = 0; i < C_PER; i++)
                    o[i] = o[i] * a + xs[u][i] * w;
                m = mn;
            }
    }
#if COMBINE_LANES > 1
    /* the lanes' states, merged in lane order by the first lane */
    UNROLL
    for (int i = 0; i < C_PER; i++)
        o_s[sl * (HEAD_DIM_PAD / 4) + dl + i * COMBINE_DL] = o[i];
    if (dl == 0) {
        m_s[sl] = m;
        l_s[sl] = l;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (sl == 0) {
        m = -INFINITY;
        for (int k = 0; k < COMBINE_LANES; k++)
            if (l_s[k] > 0.0f)
                m = fmax(m, m_s[k]);
        l = 0.0f;
        UNROLL
        for (int i = 0; i < C_PER; i++)
            o[i] = (float4)(0.0f);
        for (int k = 0; k < COMBINE_LANES; k++)
            if (l_s[k] > 0.0f) {
                const float w = exp2(m_s[k] - m);
                l = fma(l_s[k], w, l);
                UNROLL
                for (int i = 0; i < C_PER; i++)
                    o[i] += o_s[k * (HEAD_DIM_PAD / 4) + dl + i * COMBINE_DL] * w;
            }
    }
#endif
    if (sl == 0) {
        UNROLL
        for (int i = 0; i < C_PER; i++)
            store_out4(O, o_off + b * o_sb + (long)t * o_ss + h * o_sh, (dl + i * COMBINE_DL) * 4, head_dim, o[i], l);
        if (write_lse && dl == 0)
            LSE[lse_off + b * lse_sb + h * lse_sh + (long)t * lse_ss] = fcl_row_lse(m, l);
    }
}

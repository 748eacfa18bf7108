/* SPDX-License-Identifier: Apache-2.0 */
/*
 * KV-cache append: K_new, V_new [B, L_new, Hkv, D] copied into the caches at each sequence's
 * position (from the host, or from a device I32 tensor read here), one work-item per element.
 * Rows whose cache position falls outside [0, L_max), or whose page number in the block table
 * is outside [0, num_pages), are not written: nothing past the caches is ever touched.
 *
 * Specialisation (-D): ELEM_BYTES (2 or 4: elements are copied as raw bits); POS_DEVICE (positions from `positions`, else host_pos);
 * PAGED (caches are pages [num_pages, page_size, Hkv, D] through the block table; else
 * [B, L_max, Hkv, D]).
 */

#if ELEM_BYTES == 2
typedef ushort elem_t;
#else
typedef uint elem_t;
#endif

__kernel void kv_cache_append(__global const elem_t *Kn, __global const elem_t *Vn, __global elem_t *Kc,
                              __global elem_t *Vc, __global const int *positions, __global const int *table,
                              const int host_pos, const int l_new, const int head_dim, const int l_max,
                              const int page_size, const int num_pages,
                              const long kn_off, const long kn_sb, const long kn_ss, const long kn_sh,
                              const long vn_off, const long vn_sb, const long vn_ss, const long vn_sh,
                              const long k_off, const long k_s0, const long k_s1, const long k_sh,
                              const long v_off, const long v_s0, const long v_s1, const long v_sh,
                              const long pos_off, const long pos_s, const long bt_off, const long bt_sb,
                              const long bt_ss)
{
    const int d = get_global_id(0), th = get_global_id(1), b = get_global_id(2);
    const int hkv = get_global_size(1) / l_new, t = th / hkv, h = th - t * hkv;
    if (d >= head_dim)
        return;
#if POS_DEVICE
    const long p = (long)positions[pos_off + b * pos_s] + t;
#else
    const long p = (long)host_pos + t;
#endif
    if (p < 0 || p >= l_max)
        return;
#if PAGED
    const int page = table[bt_off + b * bt_sb + (p / page_size) * bt_ss];
    if (page < 0 || page >= num_pages)
        return;
    const long kr = k_off + page * k_s0 + (p % page_size) * k_s1 + h * k_sh;
    const long vr = v_off + page * v_s0 + (p % page_size) * v_s1 + h * v_sh;
#else
    const long kr = k_off + b * k_s0 + p * k_s1 + h * k_sh;
    const long vr = v_off + b * v_s0 + p * v_s1 + h * v_sh;
#endif
    Kc[kr + d] = Kn[kn_off + b * kn_sb + (long)t * kn_ss + h * kn_sh + d];
    Vc[vr + d] = Vn[vn_off + b * vn_sb + (long)t * vn_ss + h * vn_sh + d];
}

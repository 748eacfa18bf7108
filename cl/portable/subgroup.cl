/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Subgroup primitives for the portable kernels' lane-group forms: the same names and meaning as
 * the NVIDIA warp primitives of cl/nvidia/warp_nv.cl, so that a kernel written for lanes that
 * meet by shuffles (decode's team-shuffle form, the blocked forward's row reductions) runs on
 * either. Here the subgroup plays the warp. Taken only where the host knows the subgroup's size,
 * because it fixed it: -D FCL_SUBGROUP_SIZE (WARP_LANES below) with Intel's
 * cl_intel_required_subgroup_size (FCL_SUBGROUP_ATTR in common.cl), and only where the device
 * has shuffles (cl_intel_subgroups, or cl_khr_subgroups with cl_khr_subgroup_shuffle). Work-items
 * of a 1-D work-group fill its subgroups in order of local id, so lane = local id % WARP_LANES.
 * Every lane of the subgroup must call them (uniform control flow).
 */
#if !FCL_SUBGROUP_SIZE
#error "subgroup.cl needs -DFCL_SUBGROUP_SIZE"
#endif
#define WARP_LANES FCL_SUBGROUP_SIZE

#if defined(cl_intel_subgroups)
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
#define FCL_SHUFFLE_XOR(x, m) intel_sub_group_shuffle_xor((x), (uint)(m))
#define FCL_SHUFFLE(x, src) intel_sub_group_shuffle((x), (uint)(src))
#else
#pragma OPENCL EXTENSION cl_khr_subgroups : enable
#pragma OPENCL EXTENSION cl_khr_subgroup_shuffle : enable
#define FCL_SHUFFLE_XOR(x, m) sub_group_shuffle_xor((x), (uint)(m))
#define FCL_SHUFFLE(x, src) sub_group_shuffle((x), (uint)(src))
#endif

/* x from lane `lane ^ lane_mask` of the subgroup. */
inline float shuffle_xor(float x, int lane_mask)
{
    return FCL_SHUFFLE_XOR(x, lane_mask);
}

/* x from lane `src` (0 .. WARP_LANES - 1) of the subgroup. */
inline float shuffle_idx(float x, int src)
{
    return FCL_SHUFFLE(x, src);
}

/* Whether x is non-zero in every lane of the subgroup. */
inline int warp_all(int x)
{
    return sub_group_all(x);
}

/* 2^x (the NVIDIA form's flush-to-zero approximation; here the library's exp2). */
inline float exp2_ftz(float x)
{
    return exp2(x);
}

/* Waits for every lane of the subgroup; their local-memory writes before it are visible to each
 * other after it. */
inline void warp_sync(void)
{
    sub_group_barrier(CLK_LOCAL_MEM_FENCE);
}

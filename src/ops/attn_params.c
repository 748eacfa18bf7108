/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_attn_params: the default initializer and the checks every attention op shares. */
#include "ops/attn_params.h"

#include <math.h>

fcl_attn_params fcl_attn_params_default(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    return p;
}

/* A per-key or per-head F32 side tensor of shape [n] (shared) or [B, n] (only [n] when B <= 0). */
static fcl_status check_side_tensor(fcl_context ctx, const char *op, const char *what, fcl_tensor t,
                                    int64_t B, int64_t n, const char *n_name, int64_t *sb, int64_t *sn)
{
    char buf[96];
    if (t->ctx != ctx)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s belongs to another context", op, what);
    if (t->dtype != FCL_F32)
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s must be f32, got %s", op, what, fcl_dtype_name(t->dtype));
    if (t->ndim == 1 && t->shape[0] == n) {
        *sb = 0;
        *sn = t->strides[0];
        return FCL_SUCCESS;
    }
    if (B > 0 && t->ndim == 2 && t->shape[0] == B && t->shape[1] == n) {
        *sb = t->strides[0];
        *sn = t->strides[1];
        return FCL_SUCCESS;
    }
    if (B <= 0)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: %s has shape %s; expected [%s=%lld]", op, what,
                        fcl_shape_str(t, buf, sizeof buf), n_name, (long long)n);
    return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: %s has shape %s; expected [%s=%lld] or [B=%lld, %s=%lld]", op, what,
                    fcl_shape_str(t, buf, sizeof buf), n_name, (long long)n, (long long)B, n_name, (long long)n);
}

/* A window of w positions where the farthest row reaches every one of n positions on that side
 * (w >= n): unbounded. Query positions run over [sk - sq, sk - 1], so window_left >= sk lets
 * every row see key 0 and window_right >= sq every row see key sk - 1. */
static int unbounded_past(int w, int64_t n)
{
    return w >= n ? -1 : w;
}

fcl_status fcl_resolve_attn_params(fcl_context ctx, const char *op, const fcl_attn_params *p, int64_t mask_B,
                                   int64_t mask_keys, int64_t alibi_B, int64_t Hq, int64_t D, int64_t sq, int64_t sk,
                                   fcl_attn_resolved *out)
{
    if (!p)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: params is NULL (use FCL_ATTN_PARAMS_INIT)", op);
    if (!isfinite(p->scale))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: scale %g is not finite", op, (double)p->scale);
    if (p->window_left < -1)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: window_left %d is below -1 (-1 = unbounded)", op,
                        p->window_left);
    if (p->window_right < -1)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: window_right %d is below -1 (-1 = unbounded)", op,
                        p->window_right);
    if (!(p->softcap >= 0.0f) || isinf(p->softcap))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: softcap %g must be finite and >= 0 (0 = off)", op,
                        (double)p->softcap);
    out->scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)D));
    out->window_left = unbounded_past(p->window_left, sk);
    out->window_right = p->causal ? 0 : unbounded_past(p->window_right, sq);
    out->softcap = p->softcap;
    out->mask = p->key_mask;
    out->alibi = p->alibi_slopes;
    out->mask_sb = out->mask_ss = out->alibi_sb = out->alibi_sh = 0;
    fcl_status s = FCL_SUCCESS;
    if (p->key_mask)
        s = check_side_tensor(ctx, op, "key_mask", p->key_mask, mask_B, mask_keys, "Sk", &out->mask_sb,
                              &out->mask_ss);
    if (s == FCL_SUCCESS && p->alibi_slopes)
        s = check_side_tensor(ctx, op, "alibi_slopes", p->alibi_slopes, alibi_B, Hq, "Hq", &out->alibi_sb, &out->alibi_sh);
    return s;
}

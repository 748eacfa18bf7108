/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the decode tests; see support_decode.h. */
#include "support_decode.h"
#include "ref_attention.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reference of sequence b (B = 1): O [Lq, Hq, D] and LSE [Hq, Lq], float64 and naive. */
static void reference_seq(const support_decode_problem *p, int b, double *O, double *L, float *On, float *Ln)
{
    const size_t krow = (size_t)p->Hkv * p->D;
    ref_attn_problem rp = {1, p->Lq, p->eff[b], p->Hq, p->Hkv, p->D, (double)p->scale, 1, p->wl, 0,
                           (double)p->softcap, NULL, 0, NULL, 0};
    if (p->mask)
        rp.key_mask = p->mask_shared ? p->mask : p->mask + (size_t)b * p->Lmax;
    if (p->slopes)
        rp.alibi = p->alibi_bh ? p->slopes + (size_t)b * p->Hq : p->slopes;
    const float *Q = p->q + (size_t)b * p->Lq * p->Hq * p->D;
    const float *K = p->k + (size_t)b * p->Lmax * krow, *V = p->v + (size_t)b * p->Lmax * krow;
    ref_attention_forward(&rp, Q, K, V, O, L);
    ref_attention_forward_naive(&rp, p->dt, Q, K, V, On, Ln);
}

/* Compares O [B, Lq, Hq, D] and LSE [B, Hq, Lq] (may be NULL) with the reference. */
support_decode_check support_decode_check_ref(const support_decode_problem *p, const float *o, const float *lse)
{
    support_decode_check r;
    memset(&r, 0, sizeof r);
    r.bad_b = -1;
    const size_t no = (size_t)p->Lq * p->Hq * p->D, nl = (size_t)p->Hq * p->Lq;
    r.nan_o = support_count_nan(o, no * p->B);
    r.nan_l = lse ? support_count_nan(lse, nl * p->B) : 0;
    double *O = support_xmalloc(sizeof(double) * no), *L = support_xmalloc(sizeof(double) * nl);
    float *On = support_xmalloc(sizeof(float) * no), *Ln = support_xmalloc(sizeof(float) * nl);
    int failed = 0;
    for (int b = 0; b < p->B; b++) {
        reference_seq(p, b, O, L, On, Ln);
        const float *ob = o + (size_t)b * no, *lb = lse ? lse + (size_t)b * nl : NULL;
        const double eo = support_max_err_f(ob, O, no), nao = support_max_err_f(On, O, no);
        const double el = lb ? support_max_err_f(lb, L, nl) : 0.0, nal = support_max_err_f(Ln, L, nl);
        if (nao > r.naive_o)
            r.naive_o = nao;
        if (nal > r.naive_l)
            r.naive_l = nal;
        for (int h = 0; h < p->Hq; h++)
            for (int t = 0; t < p->Lq; t++) {
                const size_t li = (size_t)h * p->Lq + t;
                if (L[li] != -INFINITY) {
                    if (lb && !isfinite(lb[li]))
                        r.bad_empty++; /* a row that sees keys must have a finite LSE */
                    continue;
                }
                r.empty++;
                int bad = lb && lb[li] != -INFINITY;
                for (int d = 0; d < p->D; d++)
                    bad |= ob[((size_t)t * p->Hq + h) * p->D + d] != 0.0f; /* exactly 0 (NaN fails too) */
                r.bad_empty += bad;
            }
        const int ok = support_within(eo, nao, 2.0) && support_within(el, nal, 2.0);
        if (!ok && !failed) {
            failed = 1;
            r.bad_b = b;
            r.eo = eo;
            r.bo = 2.0 * nao + 1e-5;
            r.el = el;
            r.bl = 2.0 * nal + 1e-5;
        } else if (!failed && eo >= r.eo) {
            r.eo = eo;
            r.bo = 2.0 * nao + 1e-5;
            r.el = el;
            r.bl = 2.0 * nal + 1e-5;
        }
    }
    free(O);
    free(L);
    free(On);
    free(Ln);
    r.ok = !failed && r.nan_o == 0 && r.nan_l == 0 && r.bad_empty == 0;
    return r;
}

void support_decode_describe(const support_decode_check *r, char *buf, size_t n)
{
    snprintf(buf, n,
             "%s: seq %d O err %.3g (bound %.3g) LSE err %.3g (bound %.3g); NaN O %zu LSE %zu; "
             "bad rows %zu (%zu rows see no key)",
             r->bad_b >= 0 ? "out of tolerance" : "worst", r->bad_b, r->eo, r->bo, r->el, r->bl, r->nan_o, r->nan_l,
             r->bad_empty, r->empty);
}

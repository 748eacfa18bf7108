/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bad input for fcl_attention_forward as tables run by errors_run (support_errors.h: the
 * default problem, the edits, and what every row checks), and the tensor-creation checks that
 * stand in for layouts the forward could otherwise receive. Every row changes exactly one thing
 * from the valid call that the control rows (want FCL_SUCCESS) prove succeeds and writes every
 * element of O and LSE.
 * One test per group of rows: a process (one context) runs many rows; a failing row names
 * itself and the group goes on.
 */
#include "support.h"
#include "support_errors.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

/* The Q-shaped and K-shaped tensors. */
#define FQO (BIT(F_Q) | BIT(F_O))
#define FKV (BIT(F_K) | BIT(F_V))

/* ------------------------------------------------------------------ the forward */

static const errors_case controls[] = {
    {.name = "control_valid_call_succeeds_and_writes_outputs", .want = FCL_SUCCESS},
    /* NULL LSE; a [B, Sk] key mask, [Hq] ALiBi slopes, a window and softcap; then a shared
     * [Sk] key mask, [B, Hq] slopes and causal on top: all valid, so the rejections below are
     * about the one change */
    {"control_valid_optional_inputs_accepted/null_lse", FCL_SUCCESS, .edit = {E_ABSENT(BIT(F_LSE))}},
    {"control_valid_optional_inputs_accepted/mask_b_sk_alibi_hq_window_softcap", FCL_SUCCESS,
     .edit = {E_SPEC(S_MASK, FCL_F32, 2, B0, SK0, 0, 0), E_SPEC(S_ALIBI, FCL_F32, 1, HQ0, 0, 0, 0), E_WINDOW_LEFT(2),
              E_WINDOW_RIGHT(0), E_SOFTCAP(30.0f)}},
    {"control_valid_optional_inputs_accepted/mask_sk_alibi_b_hq_causal", FCL_SUCCESS,
     .edit = {E_SPEC(S_MASK, FCL_F32, 1, SK0, 0, 0, 0), E_SPEC(S_ALIBI, FCL_F32, 2, B0, HQ0, 0, 0), E_WINDOW_LEFT(2),
              E_WINDOW_RIGHT(0), E_SOFTCAP(30.0f), E_CAUSAL}},
};

static const errors_case null_arguments[] = {
    {"null_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_NULL_CTX}, .any = {"ctx", "context"}},
    {"null_q", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(F_Q))}, .tokens = {"Q"}},
    {"null_k", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(F_K))}, .tokens = {"K"}},
    {"null_v", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(F_V))}, .tokens = {"V"}},
    {"null_o", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(F_O))}, .tokens = {"O"}},
    {"null_params", FCL_ERR_INVALID_ARGUMENT, .edit = {E_NULL_PARAMS}, .subs = {"param"}},
};

static const errors_case shapes[] = {
    {"batch_mismatch_q_k", FCL_ERR_SHAPE, .edit = {E_DIM(FKV, 0, 11)}, .tokens = {"11", "2"}},
    /* LSE keeps Q's shape, so the one disagreement is O's Sq */
    {"seqlen_mismatch_q_o", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(F_O), 1, 13)}, .tokens = {"13", "3"}},
    {"seqlen_mismatch_k_v", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(F_V), 1, 17)}, .tokens = {"17", "5"}},
    /* K has 3 KV heads; both would divide Hq = 6 */
    {"kv_heads_mismatch_k_v", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(F_V), 2, 2)}, .tokens = {"2", "3"}},
    {"q_heads_mismatch_q_o", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(F_O), 2, 12)}, .tokens = {"12", "6"}},
    {"head_dim_mismatch_q_k", FCL_ERR_SHAPE, .edit = {E_DIM(FQO, 3, 96), E_DIM(FKV, 3, 64)}, .tokens = {"96", "64"}},
    {"head_dim_mismatch_k_v", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(F_V), 3, 40)}, .tokens = {"40", "16"}},
    {"head_dim_mismatch_q_o", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(F_O), 3, 24)}, .tokens = {"24", "16"}},
    {"q_heads_not_multiple_of_kv_heads", FCL_ERR_SHAPE, .edit = {E_DIM(FKV, 2, 4)}, .tokens = {"6", "4"}},
    {"q_ndim_3", FCL_ERR_SHAPE, .edit = {E_SPEC(F_Q, FCL_F32, 3, SQ0, HQ0, D0, 0)}, .tokens = {"Q", "3", "4"}},
    {"head_dim_above_limit", FCL_ERR_UNSUPPORTED, .edit = {E_DIM(FQO | FKV, 3, FCL_MAX_HEAD_DIM + 1)},
     .tokens = {"257", "256"}},
};

static const errors_case dtypes[] = {
    {"mixed_dtypes_q_f16_k_f32", FCL_ERR_DTYPE, .edit = {E_DTYPE(FQO, FCL_F16)}, .tokens = {"f16", "f32"}},
    {"o_dtype_differs", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(F_O), FCL_BF16)}, .tokens = {"bf16", "f32"}},
    {"q_dtype_i32", FCL_ERR_DTYPE, .edit = {E_DTYPE(FQO | FKV, FCL_I32)}, .tokens = {"i32"}},
    {"q_dtype_i8", FCL_ERR_DTYPE, .edit = {E_DTYPE(FQO | FKV, FCL_I8)}, .tokens = {"i8"}},
};

static const errors_case lse[] = {
    /* [B, Sq, Hq] instead of [B, Hq, Sq] */
    {"lse_wrong_shape_transposed", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(F_LSE), 1, SQ0), E_DIM(BIT(F_LSE), 2, HQ0)},
     .tokens = {"LSE"}},
    {"lse_wrong_rank", FCL_ERR_SHAPE, .edit = {E_SPEC(F_LSE, FCL_F32, 2, B0 * HQ0, SQ0, 0, 0)}, .tokens = {"LSE"}},
    {"lse_wrong_dtype_f16", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(F_LSE), FCL_F16)}, .tokens = {"LSE", "f16"}},
};

static const errors_case key_mask_alibi[] = {
    {"key_mask_wrong_shape", FCL_ERR_SHAPE, .edit = {E_SPEC(S_MASK, FCL_F32, 2, B0, 19, 0, 0)},
     .tokens = {"19", "5"}, .subs = {"mask"}},
    {"key_mask_wrong_batch", FCL_ERR_SHAPE, .edit = {E_SPEC(S_MASK, FCL_F32, 2, 7, SK0, 0, 0)}, .tokens = {"7"},
     .subs = {"mask"}},
    {"key_mask_wrong_dtype", FCL_ERR_DTYPE, .edit = {E_SPEC(S_MASK, FCL_F16, 2, B0, SK0, 0, 0)}, .tokens = {"f16"},
     .subs = {"mask"}},
    {"alibi_wrong_shape", FCL_ERR_SHAPE, .edit = {E_SPEC(S_ALIBI, FCL_F32, 1, 9, 0, 0, 0)}, .tokens = {"9", "6"},
     .subs = {"alibi"}},
    {"alibi_wrong_batch", FCL_ERR_SHAPE, .edit = {E_SPEC(S_ALIBI, FCL_F32, 2, 7, HQ0, 0, 0)}, .tokens = {"7"},
     .subs = {"alibi"}},
    {"alibi_wrong_dtype", FCL_ERR_DTYPE, .edit = {E_SPEC(S_ALIBI, FCL_BF16, 1, HQ0, 0, 0, 0)}, .tokens = {"bf16"},
     .subs = {"alibi"}},
};

static const errors_case scalar_params[] = {
    {"window_left_below_minus_one", FCL_ERR_INVALID_ARGUMENT, .edit = {E_WINDOW_LEFT(-2)}, .tokens = {"-2"},
     .subs = {"window"}},
    {"window_right_below_minus_one", FCL_ERR_INVALID_ARGUMENT, .edit = {E_WINDOW_RIGHT(-3)}, .tokens = {"-3"},
     .subs = {"window"}},
    {"softcap_negative", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SOFTCAP(-1.5f)}, .subs = {"softcap", "-1.5"}},
    {"scale_nan", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SCALE(NAN)}, .subs = {"scale"}},
    {"scale_inf", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SCALE(INFINITY)}, .subs = {"scale"}},
    {"softcap_nan", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SOFTCAP(NAN)}, .subs = {"softcap"}},
    {"softcap_inf", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SOFTCAP(INFINITY)}, .subs = {"softcap"}},
};

/* Tensors of another context, and an O that shares memory with an input (LSE left out). */
static const errors_case ownership_aliasing[] = {
    {"tensor_from_another_context/k", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(F_K))}, .tokens = {"K"},
     .subs = {"context"}},
    {"tensor_from_another_context/key_mask", FCL_ERR_INVALID_ARGUMENT,
     .edit = {E_SPEC(S_MASK, FCL_F32, 1, SK0, 0, 0, 0), E_FOREIGN(BIT(S_MASK))}, .tokens = {"key_mask"},
     .subs = {"context"}},
    /* one buffer holding Q's elements, then O's: O shifted one element back overlaps Q */
    {"output_overlaps_input/o_on_last_element_of_q", FCL_ERR_INVALID_ARGUMENT,
     .edit = {E_ABSENT(BIT(F_LSE)), E_PLACE(F_Q, 0), E_ON_LAST(F_O, F_Q)}, .tokens = {"O"}, .subs = {"overlap"}},
    {"output_overlaps_input/o_is_q", FCL_ERR_INVALID_ARGUMENT, .edit = {E_ABSENT(BIT(F_LSE)), E_PASS_AS(F_O, F_Q)},
     .tokens = {"O"}, .subs = {"overlap"}},
    {"output_overlaps_input/o_is_k", FCL_ERR_SHAPE, .edit = {E_ABSENT(BIT(F_LSE)), E_PASS_AS(F_O, F_K)},
     .also = FCL_ERR_INVALID_ARGUMENT},
    /* control: O right after Q in the same buffer does not overlap */
    {"output_overlaps_input/control_o_next_to_q", FCL_SUCCESS,
     .edit = {E_ABSENT(BIT(F_LSE)), E_PLACE(F_Q, 0), E_NEXT_TO(F_O, F_Q)}},
};

Test(forward_errors, controls) { ERRORS_RUN(ERRORS_FORWARD, controls); }
Test(forward_errors, null_arguments) { ERRORS_RUN(ERRORS_FORWARD, null_arguments); }
Test(forward_errors, shapes) { ERRORS_RUN(ERRORS_FORWARD, shapes); }
Test(forward_errors, dtypes) { ERRORS_RUN(ERRORS_FORWARD, dtypes); }
Test(forward_errors, lse) { ERRORS_RUN(ERRORS_FORWARD, lse); }
Test(forward_errors, key_mask_alibi) { ERRORS_RUN(ERRORS_FORWARD, key_mask_alibi); }
Test(forward_errors, scalar_params) { ERRORS_RUN(ERRORS_FORWARD, scalar_params); }
Test(forward_errors, ownership_aliasing) { ERRORS_RUN(ERRORS_FORWARD, ownership_aliasing); }

Test(forward_errors, params_default_matches_init)
{
    fcl_attn_params a = fcl_attn_params_default();
    fcl_attn_params b = FCL_ATTN_PARAMS_INIT;
    cr_assert(a.scale == 0.0f && b.scale == 0.0f);
    cr_assert(a.causal == 0 && b.causal == 0);
    cr_assert(a.window_left == -1 && b.window_left == -1);
    cr_assert(a.window_right == -1 && b.window_right == -1);
    cr_assert(a.softcap == 0.0f && b.softcap == 0.0f);
    cr_assert(a.key_mask == NULL && b.key_mask == NULL);
    cr_assert(a.alibi_slopes == NULL && b.alibi_slopes == NULL);
}

/* ------------------------------------------------------------------ layouts
 * A forward can only receive tensors that creation accepted, and creation refuses a
 * non-contiguous last dim and any view reaching past its buffer. */

/* What a layout row views: fcl_tensor_view of a tensor, or fcl_tensor_wrap of a buffer. */
enum {
    PADDED, /* F32 [B0, SQ0, HQ0, 2 * D0]: rows padded to twice the head dim */
    PLAIN,  /* F32 [B0, SQ0, HQ0, D0], PLAIN_N elements */
    INNER,  /* a view of PLAIN's second half */
    BUFFER, /* a cl_mem of 100 floats, wrapped as `dtype` */
    NBASE
};
enum { PLAIN_N = B0 * SQ0 * HQ0 * D0 };

typedef struct layout_case {
    const char *name;
    int base;
    fcl_status want;
    int ndim;
    int64_t shape[4];
    int64_t offset; /* elements */
    int has_strides;
    int64_t strides[4];
    fcl_dtype dtype; /* BUFFER only */
    const char *tokens[2], *subs[1], *any[2];
    fcl_status also;
} layout_case;

#define STRIDES(...) .has_strides = 1, .strides = {__VA_ARGS__}

static const layout_case layouts[] = {
    /* view_noncontiguous_last_dim */
    {"view_noncontiguous_last_dim/control_stride_1_into_padded_rows", PADDED, FCL_SUCCESS, 4, {B0, SQ0, HQ0, D0},
     .offset = 0,
     STRIDES(SQ0 * HQ0 * 2 * D0, HQ0 * 2 * D0, 2 * D0, 1)},
    {"view_noncontiguous_last_dim/last_dim_stride_2", PADDED, FCL_ERR_LAYOUT, 4, {B0, SQ0, HQ0, D0}, .offset = 0,
     STRIDES(SQ0 * HQ0 * 2 * D0, HQ0 * 2 * D0, 2 * D0, 2), .tokens = {"2"}, .subs = {"stride"}},
    {"view_noncontiguous_last_dim/last_dim_stride_0", PADDED, FCL_ERR_LAYOUT, 4, {B0, SQ0, HQ0, D0}, .offset = 0,
     STRIDES(SQ0 * HQ0 * 2 * D0, HQ0 * 2 * D0, 2 * D0, 0)},
    /* wrap_noncontiguous_last_dim */
    {"wrap_noncontiguous_last_dim/control_row_stride_20", BUFFER, FCL_SUCCESS, 2, {4, 10}, .offset = 0, STRIDES(20, 1)},
    {"wrap_noncontiguous_last_dim/last_dim_stride_2", BUFFER, FCL_ERR_LAYOUT, 2, {4, 10}, .offset = 0, STRIDES(20, 2),
     .subs = {"stride"}},
    /* view_past_buffer_end */
    {"view_past_buffer_end/control_whole_tensor", PLAIN, FCL_SUCCESS, 4, {B0, SQ0, HQ0, D0}, .offset = 0},
    {"view_past_buffer_end/control_last_element", PLAIN, FCL_SUCCESS, 1, {1}, .offset = PLAIN_N - 1},
    {"view_past_buffer_end/control_flat", PLAIN, FCL_SUCCESS, 1, {PLAIN_N}, .offset = 0},
    {"view_past_buffer_end/offset_numel", PLAIN, FCL_ERR_LAYOUT, 1, {1}, .offset = PLAIN_N},
    {"view_past_buffer_end/full_shape_offset_1", PLAIN, FCL_ERR_LAYOUT, 4, {B0, SQ0, HQ0, D0}, .offset = 1},
    {"view_past_buffer_end/flat_offset_1", PLAIN, FCL_ERR_LAYOUT, 1, {PLAIN_N}, .offset = 1},
    /* [B, H, S, D] permuted views; the second's strides reach one row too far */
    {"view_past_buffer_end/control_permuted", PLAIN, FCL_SUCCESS, 4, {B0, HQ0, SQ0, D0}, .offset = 0,
     STRIDES(SQ0 * HQ0 * D0, D0, HQ0 * D0, 1)},
    {"view_past_buffer_end/permuted_stride_too_large", PLAIN, FCL_ERR_LAYOUT, 4, {B0, HQ0, SQ0, D0}, .offset = 0,
     STRIDES(SQ0 * HQ0 * D0, D0, HQ0 * D0 + D0, 1)},
    /* a view of a view: offsets add, so an offset fine for the inner view is past the end */
    {"view_past_buffer_end/control_view_of_view_offset_0", INNER, FCL_SUCCESS, 1, {PLAIN_N / 2}, .offset = 0},
    {"view_past_buffer_end/control_view_of_view_last", INNER, FCL_SUCCESS, 1, {1}, .offset = PLAIN_N / 2 - 1},
    {"view_past_buffer_end/view_of_view_past_the_end", INNER, FCL_ERR_LAYOUT, 1, {1}, .offset = PLAIN_N / 2},
    /* negative offsets address before the buffer */
    {"view_past_buffer_end/negative_offset", PLAIN, FCL_ERR_LAYOUT, 1, {1}, .offset = -1,
     .also = FCL_ERR_INVALID_ARGUMENT},
    /* wrap_past_buffer_end */
    {"wrap_past_buffer_end/control_exactly_the_buffer", BUFFER, FCL_SUCCESS, 1, {100}, .offset = 0},
    {"wrap_past_buffer_end/control_last_four_elements", BUFFER, FCL_SUCCESS, 1, {4}, .offset = 96},
    {"wrap_past_buffer_end/control_strided_offset_5", BUFFER, FCL_SUCCESS, 2, {3, 4}, .offset = 5, STRIDES(10, 1)},
    /* the message gives the buffer's size: 100 elements or 400 bytes */
    {"wrap_past_buffer_end/offset_97_plus_4_elements", BUFFER, FCL_ERR_LAYOUT, 1, {4}, .offset = 97,
     .any = {"100", "400"}},
    {"wrap_past_buffer_end/101_elements_in_100", BUFFER, FCL_ERR_LAYOUT, 1, {101}, .offset = 0},
    {"wrap_past_buffer_end/stride_40_offset_20", BUFFER, FCL_ERR_LAYOUT, 2, {3, 4}, .offset = 20, STRIDES(40, 1)},
    {"wrap_past_buffer_end/offset_far_past_the_end", BUFFER, FCL_ERR_LAYOUT, 1, {4}, .offset = 1000},
    {"wrap_past_buffer_end/negative_offset", BUFFER, FCL_ERR_LAYOUT, 1, {4}, .offset = -1,
     .also = FCL_ERR_INVALID_ARGUMENT},
    /* the buffer's size is counted in elements of the dtype: 100 floats = 200 halves */
    {"wrap_past_buffer_end/control_200_f16_in_400_bytes", BUFFER, FCL_SUCCESS, 1, {200}, .offset = 0, .dtype = FCL_F16},
    {"wrap_past_buffer_end/201_f16_in_400_bytes", BUFFER, FCL_ERR_LAYOUT, 1, {201}, .offset = 0, .dtype = FCL_F16},
};

/* The row's view or wrap: a control must give a tensor, a rejection the status, no tensor and
 * a sentence naming the row's tokens / substrings. */
static void run_layout(fcl_context ctx, fcl_tensor const *bases, cl_mem buf, const layout_case *row)
{
    fcl_tensor v = NULL;
    const int64_t *strides = row->has_strides ? row->strides : NULL;
    const char *call = row->base == BUFFER ? "fcl_tensor_wrap" : "fcl_tensor_view";
    fcl_status st = row->base == BUFFER
                        ? fcl_tensor_wrap(ctx, buf, row->dtype, row->ndim, row->shape, strides, row->offset, &v)
                        : fcl_tensor_view(bases[row->base], row->ndim, row->shape, strides, row->offset, &v);
    const char *msg = fcl_last_error(ctx);
    if (errors_expect_status(row->name, call, st, row->want, row->also, msg) && row->want != FCL_SUCCESS)
        errors_expect_message(row->name, msg, row->tokens, 2, row->subs, 1, row->any, 2);
    if (row->want == FCL_SUCCESS)
        cr_expect(v != NULL, "[%s] a successful %s returned no tensor", row->name, call);
    else
        cr_expect(v == NULL, "[%s] a rejected %s returned a tensor", row->name, call);
    fcl_tensor_release(v);
}

Test(forward_errors, layouts)
{
    fcl_context ctx = support_context();
    fcl_tensor bases[NBASE] = {NULL};
    const int64_t padded[4] = {B0, SQ0, HQ0, 2 * D0}, plain[4] = {B0, SQ0, HQ0, D0}, half[1] = {PLAIN_N / 2};
    cr_assert(fcl_tensor_create(ctx, FCL_F32, 4, padded, &bases[PADDED]) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    cr_assert(fcl_tensor_create(ctx, FCL_F32, 4, plain, &bases[PLAIN]) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    cr_assert(fcl_tensor_view(bases[PLAIN], 1, half, NULL, PLAIN_N / 2, &bases[INNER]) == FCL_SUCCESS, "%s",
              fcl_last_error(ctx));
    cl_int err = CL_SUCCESS;
    cl_mem buf = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE, 100 * sizeof(float), NULL, &err);
    cr_assert(err == CL_SUCCESS && buf != NULL, "clCreateBuffer: %d", (int)err);
    for (size_t r = 0; r < sizeof layouts / sizeof layouts[0]; r++)
        run_layout(ctx, bases, buf, &layouts[r]);
    clReleaseMemObject(buf);
    for (int b = 0; b < NBASE; b++)
        fcl_tensor_release(bases[b]);
    fcl_context_release(ctx);
}

/* ------------------------------------------------------------------ status strings */

Test(forward_errors, status_strings)
{
    static const struct { fcl_status s; const char *name; } all[] = {
        {FCL_SUCCESS, "FCL_SUCCESS"},
        {FCL_ERR_INVALID_ARGUMENT, "FCL_ERR_INVALID_ARGUMENT"},
        {FCL_ERR_SHAPE, "FCL_ERR_SHAPE"},
        {FCL_ERR_DTYPE, "FCL_ERR_DTYPE"},
        {FCL_ERR_LAYOUT, "FCL_ERR_LAYOUT"},
        {FCL_ERR_UNSUPPORTED, "FCL_ERR_UNSUPPORTED"},
        {FCL_ERR_NO_DEVICE, "FCL_ERR_NO_DEVICE"},
        {FCL_ERR_OPENCL, "FCL_ERR_OPENCL"},
        {FCL_ERR_BUILD, "FCL_ERR_BUILD"},
        {FCL_ERR_OUT_OF_MEMORY, "FCL_ERR_OUT_OF_MEMORY"},
    };
    const size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n; i++) {
        const char *got = fcl_status_string(all[i].s);
        cr_assert(got != NULL, "fcl_status_string(%d) is NULL", (int)all[i].s);
        cr_assert_str_eq(got, all[i].name, "fcl_status_string(%d)", (int)all[i].s);
    }
    const int unknown[] = {1, 7, -10, -100, 12345, -2147483647};
    for (size_t u = 0; u < sizeof unknown / sizeof unknown[0]; u++) {
        const char *got = fcl_status_string((fcl_status)unknown[u]);
        cr_assert(got != NULL && got[0] != '\0', "fcl_status_string(%d) is NULL or empty", unknown[u]);
        for (size_t i = 0; i < n; i++)
            cr_assert(strcmp(got, all[i].name) != 0, "unknown status %d is named %s", unknown[u], got);
    }
}

/* test_scope.c: precision scoping of spec/scoping.md — nesting with inner override and
 * exact restore, matched tokens (mismatched and double exits rejected, nothing changed),
 * the callback form restoring on every exit path, islands, module policies, the recipe
 * never mutated, the first-module flag, the RNG state and the fault hook on enter/exit. */
#include <string.h>

#include "qspec/scope.h"
#include "qstest.h"

static qs_scope_recipe recipe_of(qs_recipe_kind kind)
{
    qs_scope_recipe r;
    ck_assert_int_eq(qs_scope_recipe_default(NULL, &r, kind), QS_OK);
    return r;
}

static qs_scope_state state_of(qs_ctx *ctx)
{
    qs_scope_state st;
    ck_assert_int_eq(qs_scope_get(ctx, &st), QS_OK);
    return st;
}

/* [SCOPE-STATE] a new context is outside every region: all fields zero. */
START_TEST(test_new_context_is_outside_every_region)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_scope_state st = state_of(ctx);
    ck_assert_int_eq(st.enabled, 0);
    ck_assert_int_eq(st.calibrating, 0);
    ck_assert_int_eq(st.has_recipe, 0);
    ck_assert_int_eq(st.depth, 0);
    ck_assert_int_eq(st.first_module, 0);
    ck_assert_int_eq(st.recompute_phase, 0);
    ck_assert_int_eq(st.island, 0);
    qs_ctx_free(ctx);
}
END_TEST

/* [SCOPE-ENTER] [SCOPE-EXIT] the inner region overrides every field; each exit brings
 * back exactly the state its enter replaced. */
START_TEST(test_inner_region_overrides_and_exit_restores_exactly)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_scope_recipe mx = recipe_of(QS_RECIPE_MXFP8), ds = recipe_of(QS_RECIPE_DELAYED);
    qs_autocast_params outer = {1, 0, &mx, 7}, inner = {0, 1, &ds, 3};
    qs_scope_token t1, t2;
    qs_scope_state s0 = state_of(ctx);
    ck_assert_int_eq(qs_autocast_enter(ctx, &outer, &t1), QS_OK);
    qs_scope_state s1 = state_of(ctx);
    ck_assert_int_eq(s1.enabled, 1);
    ck_assert_int_eq(s1.recipe.kind, QS_RECIPE_MXFP8);
    ck_assert_int_eq(s1.group, 7);
    ck_assert_int_eq(s1.depth, 1);
    ck_assert_int_eq(s1.first_module, 1);
    ck_assert_int_eq(qs_autocast_enter(ctx, &inner, &t2), QS_OK);
    qs_scope_state s2 = state_of(ctx);
    ck_assert_int_eq(s2.enabled, 0);
    ck_assert_int_eq(s2.calibrating, 1);
    ck_assert_int_eq(s2.recipe.kind, QS_RECIPE_DELAYED);
    ck_assert_int_eq(s2.group, 3);
    ck_assert_int_eq(s2.depth, 2);
    ck_assert_uint_ne(t1.id, t2.id);
    ck_assert_int_eq(qs_autocast_exit(ctx, t2), QS_OK);
    qs_scope_state back1 = state_of(ctx);
    ck_assert(qs_scope_state_equal(&back1, &s1));
    ck_assert_int_eq(qs_autocast_exit(ctx, t1), QS_OK);
    qs_scope_state back0 = state_of(ctx);
    ck_assert(qs_scope_state_equal(&back0, &s0));
    qs_ctx_free(ctx);
}
END_TEST

/* [SCOPE-TOKEN] exiting the outer region while an inner one is open is rejected with
 * QS_ERR_STATE naming the mismatch, and nothing changes. */
START_TEST(test_mismatched_exit_is_rejected_and_changes_nothing)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_scope_recipe cs = recipe_of(QS_RECIPE_CURRENT);
    qs_autocast_params p = {1, 0, &cs, 0};
    qs_scope_token t1, t2;
    ck_assert_int_eq(qs_autocast_enter(ctx, &p, &t1), QS_OK);
    ck_assert_int_eq(qs_autocast_enter(ctx, &p, &t2), QS_OK);
    qs_scope_state before = state_of(ctx);
    ck_assert_int_eq(qs_autocast_exit(ctx, t1), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "mismatched exit"));
    qs_scope_state after = state_of(ctx);
    ck_assert(qs_scope_state_equal(&before, &after));
    ck_assert_int_eq(after.depth, 2);
    ck_assert_int_eq(qs_autocast_exit(ctx, t2), QS_OK);
    ck_assert_int_eq(qs_autocast_exit(ctx, t1), QS_OK);
    ck_assert_int_eq(state_of(ctx).depth, 0);
    qs_ctx_free(ctx);
}
END_TEST

/* [SCOPE-TOKEN] a second exit of the same token, and a token never issued, are errors
 * that change nothing. */
START_TEST(test_double_exit_and_unknown_token_are_rejected)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_scope_recipe cs = recipe_of(QS_RECIPE_CURRENT);
    qs_autocast_params p = {1, 0, &cs, 0};
    qs_scope_token outer, t;
    ck_assert_int_eq(qs_autocast_enter(ctx, &p, &outer), QS_OK);
    ck_assert_int_eq(qs_autocast_enter(ctx, &p, &t), QS_OK);
    ck_assert_int_eq(qs_autocast_exit(ctx, t), QS_OK);
    qs_scope_state before = state_of(ctx);
    ck_assert_int_eq(qs_autocast_exit(ctx, t), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "double exit"));
    qs_scope_token bogus = {999};
    ck_assert_int_eq(qs_autocast_exit(ctx, bogus), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "never issued"));
    qs_scope_state after = state_of(ctx);
    ck_assert(qs_scope_state_equal(&before, &after));
    ck_assert_int_eq(qs_autocast_exit(ctx, outer), QS_OK);
    ck_assert_int_eq(qs_autocast_exit(ctx, outer), QS_ERR_STATE);
    qs_ctx_free(ctx);
}
END_TEST

/* [SCOPE-ENTER] an enabled region without a recipe is rejected and enters nothing. */
START_TEST(test_enabled_region_without_recipe_is_rejected)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_autocast_params p = {1, 0, NULL, 0};
    qs_scope_token t = {0};
    ck_assert_int_eq(qs_autocast_enter(ctx, &p, &t), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(state_of(ctx).depth, 0);
    ck_assert_uint_eq(t.id, 0);
    qs_ctx_free(ctx);
}
END_TEST

typedef struct body_arg {
    int calls;
    qs_status ret;
    int leave_open;
    qs_scope_state seen;
} body_arg;

static qs_status body(qs_ctx *ctx, void *arg)
{
    body_arg *b = arg;
    b->calls++;
    qs_scope_get(ctx, &b->seen);
    if (b->leave_open) {
        qs_scope_recipe r;
        qs_scope_recipe_default(ctx, &r, QS_RECIPE_NVFP4);
        qs_autocast_params p = {1, 0, &r, 0};
        qs_scope_token t;
        for (int i = 0; i < b->leave_open; i++)
            qs_autocast_enter(ctx, &p, &t);
    }
    return b->ret;
}

/* [SCOPE-RESTORE-ERR] the callback form restores the enclosing state when the body
 * succeeds, returns an error, or leaves regions open (then it reports QS_ERR_STATE). */
START_TEST(test_callback_form_restores_on_every_exit_path)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_scope_recipe mx = recipe_of(QS_RECIPE_MXFP8), bl = recipe_of(QS_RECIPE_BLOCK);
    qs_autocast_params outer = {1, 0, &mx, 1}, inner = {1, 0, &bl, 2};
    qs_scope_token t;
    ck_assert_int_eq(qs_autocast_enter(ctx, &outer, &t), QS_OK);
    qs_scope_state before = state_of(ctx);
    const qs_status rets[] = {QS_OK, QS_ERR_SHAPE, QS_ERR_INJECTED};
    for (int i = 0; i < 3; i++) {
        body_arg b = {0, rets[i], 0, {0}};
        ck_assert_int_eq(qs_autocast_run(ctx, &inner, body, &b), rets[i]);
        ck_assert_int_eq(b.calls, 1);
        ck_assert_int_eq(b.seen.recipe.kind, QS_RECIPE_BLOCK);
        ck_assert_int_eq(b.seen.depth, 2);
        qs_scope_state after = state_of(ctx);
        ck_assert(qs_scope_state_equal(&before, &after));
    }
    body_arg open = {0, QS_OK, 3, {0}};
    ck_assert_int_eq(qs_autocast_run(ctx, &inner, body, &open), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "left 3 region(s) open"));
    qs_scope_state after = state_of(ctx);
    ck_assert(qs_scope_state_equal(&before, &after));
    ck_assert_int_eq(qs_autocast_exit(ctx, t), QS_OK);
    qs_ctx_free(ctx);
}
END_TEST

/* [SCOPE-FAULT] [SCOPE-RESTORE-ERR] an injected failure in enter or exit changes nothing:
 * a failed enter enters nothing, a failed exit leaves the region entered. */
START_TEST(test_injected_enter_and_exit_failures_change_nothing)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_scope_recipe cs = recipe_of(QS_RECIPE_CURRENT);
    qs_autocast_params p = {1, 0, &cs, 0};
    qs_scope_token t;
    qs_scope_state s0 = state_of(ctx);
    qs_fault_set(ctx, 1);
    ck_assert_int_eq(qs_autocast_enter(ctx, &p, &t), QS_ERR_INJECTED);
    qs_scope_state a = state_of(ctx);
    ck_assert(qs_scope_state_equal(&a, &s0));
    qs_fault_set(ctx, 2);
    ck_assert_int_eq(qs_autocast_enter(ctx, &p, &t), QS_OK);
    qs_scope_state s1 = state_of(ctx);
    ck_assert_int_eq(qs_autocast_exit(ctx, t), QS_ERR_INJECTED);
    qs_scope_state b = state_of(ctx);
    ck_assert(qs_scope_state_equal(&b, &s1));
    ck_assert_int_eq(qs_fault_steps(ctx), 2);
    ck_assert_int_eq(qs_autocast_exit(ctx, t), QS_OK);
    qs_scope_state c = state_of(ctx);
    ck_assert(qs_scope_state_equal(&c, &s0));
    body_arg arg = {0, QS_OK, 0, {0}};
    qs_fault_set(ctx, 1); /* the callback form's enter fails: the body never runs */
    ck_assert_int_eq(qs_autocast_run(ctx, &p, body, &arg), QS_ERR_INJECTED);
    ck_assert_int_eq(arg.calls, 0);
    qs_fault_set(ctx, 0);
    ck_assert_int_eq(qs_autocast_run(ctx, &p, body, &arg), QS_OK);
    ck_assert_int_eq(qs_fault_steps(ctx), 1); /* the callback form's exit is not a step */
    qs_ctx_free(ctx);
}
END_TEST

/* [SCOPE-POLICY-QUANT] [SCOPE-POLICY-CALIB] [SCOPE-POLICY-HP] a linear quantizes when
 * enabled, calibrates when only calibrating, and runs high precision otherwise. */
START_TEST(test_quantizable_module_policy_follows_the_state)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_scope_recipe ds = recipe_of(QS_RECIPE_DELAYED);
    qs_autocast_params en = {1, 1, &ds, 0}, cal = {0, 1, &ds, 0}, off = {0, 0, NULL, 0};
    qs_precision prec;
    qs_scope_token t;
    ck_assert_int_eq(qs_scope_decide(ctx, QS_MODULE_QUANTIZABLE, "l", &prec), QS_OK);
    ck_assert_int_eq(prec, QS_PREC_HIGH);
    ck_assert_int_eq(qs_autocast_enter(ctx, &en, &t), QS_OK);
    ck_assert_int_eq(qs_scope_decide(ctx, QS_MODULE_QUANTIZABLE, "l", &prec), QS_OK);
    ck_assert_int_eq(prec, QS_PREC_QUANTIZED);
    ck_assert_int_eq(qs_autocast_exit(ctx, t), QS_OK);
    ck_assert_int_eq(qs_autocast_enter(ctx, &cal, &t), QS_OK);
    ck_assert_int_eq(qs_scope_decide(ctx, QS_MODULE_QUANTIZABLE, "l", &prec), QS_OK);
    ck_assert_int_eq(prec, QS_PREC_CALIBRATING);
    ck_assert_int_eq(qs_autocast_exit(ctx, t), QS_OK);
    ck_assert_int_eq(qs_autocast_enter(ctx, &off, &t), QS_OK);
    ck_assert_int_eq(qs_scope_decide(ctx, QS_MODULE_QUANTIZABLE, "l", &prec), QS_OK);
    ck_assert_int_eq(prec, QS_PREC_HIGH);
    ck_assert_int_eq(qs_autocast_exit(ctx, t), QS_OK);
    ck_assert_str_eq(qs_precision_name(QS_PREC_CALIBRATING), "calibrating");
    qs_ctx_free(ctx);
}
END_TEST

/* [SCOPE-ISLAND] [SCOPE-ISLAND-REJECT] an input-precision module rejects an enabled or a
 * calibrating region with a message naming it, runs as an island inside one, and runs
 * high precision outside every region. */
START_TEST(test_input_precision_module_rejects_region_without_island)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_scope_recipe mx = recipe_of(QS_RECIPE_MXFP8);
    qs_autocast_params en = {1, 0, &mx, 0}, cal = {0, 1, &mx, 0};
    qs_precision prec;
    qs_scope_token t, ti;
    ck_assert_int_eq(qs_scope_decide(ctx, QS_MODULE_INPUT_PRECISION, "gdn0", &prec), QS_OK);
    ck_assert_int_eq(prec, QS_PREC_HIGH);
    ck_assert_int_eq(qs_autocast_enter(ctx, &en, &t), QS_OK);
    ck_assert_int_eq(qs_scope_decide(ctx, QS_MODULE_INPUT_PRECISION, "gdn0", &prec), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "'gdn0' cannot run quantized"));
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "mxfp8"));
    ck_assert_int_eq(qs_island_enter(ctx, QS_BF16, &ti), QS_OK);
    ck_assert_int_eq(qs_scope_decide(ctx, QS_MODULE_INPUT_PRECISION, "gdn0", &prec), QS_OK);
    ck_assert_int_eq(prec, QS_PREC_ISLAND);
    ck_assert_int_eq(qs_scope_decide(ctx, QS_MODULE_QUANTIZABLE, "lin", &prec), QS_OK);
    ck_assert_int_eq(prec, QS_PREC_HIGH);
    ck_assert_int_eq(qs_autocast_exit(ctx, ti), QS_OK);
    ck_assert_int_eq(qs_autocast_exit(ctx, t), QS_OK);
    ck_assert_int_eq(qs_autocast_enter(ctx, &cal, &t), QS_OK);
    ck_assert_int_eq(qs_scope_decide(ctx, QS_MODULE_INPUT_PRECISION, "gdn0", &prec), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "calibrating"));
    ck_assert_int_eq(qs_autocast_exit(ctx, t), QS_OK);
    qs_ctx_free(ctx);
}
END_TEST

/* [SCOPE-ISLAND] [SCOPE-ISLAND-NOMUTATE] [SCOPE-RECIPE] an island turns quantization and
 * calibration off, keeps the enclosing recipe bit for bit, needs a BF16/FP16 input dtype, and
 * restores the enclosing state exactly; the caller's recipe object is never written. */
START_TEST(test_island_keeps_the_enclosing_recipe_and_restores)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_scope_recipe mx = recipe_of(QS_RECIPE_MXFP8);
    uint64_t user_digest = qs_scope_recipe_digest(&mx);
    qs_autocast_params en = {1, 1, &mx, 5};
    qs_scope_token t, ti;
    ck_assert_int_eq(qs_autocast_enter(ctx, &en, &t), QS_OK);
    qs_scope_state outer = state_of(ctx);
    uint64_t enclosing = qs_scope_recipe_digest(&outer.recipe);
    ck_assert_int_eq(qs_island_enter(ctx, QS_FP32, &ti), QS_ERR_DTYPE);
    ck_assert_int_eq(qs_island_enter(ctx, QS_FP16, &ti), QS_OK);
    qs_scope_state in = state_of(ctx);
    ck_assert_int_eq(in.enabled, 0);
    ck_assert_int_eq(in.calibrating, 0);
    ck_assert_int_eq(in.island, 1);
    ck_assert_int_eq(in.island_dtype, QS_FP16);
    ck_assert_int_eq(in.group, 5);
    ck_assert_uint_eq(qs_scope_recipe_digest(&in.recipe), enclosing);
    ck_assert_int_eq(qs_autocast_exit(ctx, ti), QS_OK);
    qs_scope_state back = state_of(ctx);
    ck_assert(qs_scope_state_equal(&back, &outer));
    ck_assert_uint_eq(qs_scope_recipe_digest(&back.recipe), enclosing);
    ck_assert_int_eq(qs_autocast_exit(ctx, t), QS_OK);
    ck_assert_uint_eq(qs_scope_recipe_digest(&mx), user_digest);
    /* the digest sees a one-field change */
    mx.cfg[QS_SCOPE_X].margin = 1;
    ck_assert_uint_ne(qs_scope_recipe_digest(&mx), user_digest);
    qs_ctx_free(ctx);
}
END_TEST

/* [SCOPE-FIRST-MODULE] first_module is set by the outermost enter only; an inner exit does
 * not bring a consumed flag back; the outermost exit restores the outside value. */
START_TEST(test_first_module_flag_is_not_restored_by_an_inner_exit)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_scope_recipe ds = recipe_of(QS_RECIPE_DELAYED);
    qs_autocast_params p = {1, 0, &ds, 0};
    qs_scope_token t1, t2;
    ck_assert_int_eq(qs_autocast_enter(ctx, &p, &t1), QS_OK);
    ck_assert_int_eq(state_of(ctx).first_module, 1);
    ck_assert_int_eq(qs_autocast_enter(ctx, &p, &t2), QS_OK);
    ck_assert_int_eq(state_of(ctx).first_module, 1);
    ck_assert_int_eq(qs_scope_take_first_module(ctx), 1); /* a module consumes it */
    ck_assert_int_eq(qs_scope_take_first_module(ctx), 0); /* once */
    ck_assert_int_eq(qs_autocast_exit(ctx, t2), QS_OK);
    ck_assert_int_eq(state_of(ctx).depth, 1);
    ck_assert_int_eq(state_of(ctx).first_module, 0); /* not brought back */
    ck_assert_int_eq(qs_scope_take_first_module(ctx), 0);
    ck_assert_int_eq(qs_autocast_exit(ctx, t1), QS_OK);
    ck_assert_int_eq(state_of(ctx).first_module, 0);
    qs_ctx_free(ctx);
}
END_TEST

/* [SCOPE-STATE] [SCOPE-RNG] two contexts never interact: regions, RNG and fault hooks of
 * one are invisible to the other. */
START_TEST(test_two_contexts_keep_separate_scopes)
{
    qs_ctx *a = qs_ctx_new(), *b = qs_ctx_new();
    qs_scope_recipe cs = recipe_of(QS_RECIPE_CURRENT);
    qs_autocast_params p = {1, 0, &cs, 0};
    qs_scope_token t;
    ck_assert_int_eq(qs_autocast_enter(a, &p, &t), QS_OK);
    qs_rng_set(a, 11, 22);
    qs_fault_set(a, 1);
    ck_assert_int_eq(state_of(b).depth, 0);
    uint64_t seed, off;
    qs_rng_get(b, &seed, &off);
    ck_assert_uint_eq(seed, 0);
    ck_assert_uint_eq(off, 0);
    ck_assert_int_eq(qs_autocast_enter(b, &p, &t), QS_OK); /* b's hook is not armed */
    qs_rng_get(a, &seed, &off);
    ck_assert_uint_eq(seed, 11);
    ck_assert_uint_eq(off, 22);
    qs_ctx_free(a);
    qs_ctx_free(b);
}
END_TEST

/* [SCOPE-ENTER] regions nest up to QS_SCOPE_MAX_DEPTH; one more is QS_ERR_STATE. */
START_TEST(test_nesting_deeper_than_the_limit_is_rejected)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_autocast_params p = {0, 0, NULL, 0};
    qs_scope_token t[QS_SCOPE_MAX_DEPTH + 1];
    for (int i = 0; i < QS_SCOPE_MAX_DEPTH; i++)
        ck_assert_int_eq(qs_autocast_enter(ctx, &p, &t[i]), QS_OK);
    ck_assert_int_eq(qs_autocast_enter(ctx, &p, &t[QS_SCOPE_MAX_DEPTH]), QS_ERR_STATE);
    ck_assert_int_eq(state_of(ctx).depth, QS_SCOPE_MAX_DEPTH);
    for (int i = QS_SCOPE_MAX_DEPTH - 1; i >= 0; i--)
        ck_assert_int_eq(qs_autocast_exit(ctx, t[i]), QS_OK);
    ck_assert_int_eq(state_of(ctx).depth, 0);
    qs_ctx_free(ctx);
}
END_TEST

static Suite *scope_suite(void)
{
    Suite *s = suite_create("scope");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_new_context_is_outside_every_region);
    tcase_add_test(tc, test_inner_region_overrides_and_exit_restores_exactly);
    tcase_add_test(tc, test_mismatched_exit_is_rejected_and_changes_nothing);
    tcase_add_test(tc, test_double_exit_and_unknown_token_are_rejected);
    tcase_add_test(tc, test_enabled_region_without_recipe_is_rejected);
    tcase_add_test(tc, test_callback_form_restores_on_every_exit_path);
    tcase_add_test(tc, test_injected_enter_and_exit_failures_change_nothing);
    tcase_add_test(tc, test_quantizable_module_policy_follows_the_state);
    tcase_add_test(tc, test_input_precision_module_rejects_region_without_island);
    tcase_add_test(tc, test_island_keeps_the_enclosing_recipe_and_restores);
    tcase_add_test(tc, test_first_module_flag_is_not_restored_by_an_inner_exit);
    tcase_add_test(tc, test_two_contexts_keep_separate_scopes);
    tcase_add_test(tc, test_nesting_deeper_than_the_limit_is_rejected);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qst_run(scope_suite());
}

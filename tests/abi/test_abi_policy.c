/*
 * test_abi_policy.c - qc_policy_init(_sized), qc_comm_set_layer_policy, qc_comm_get_layer_policy,
 * qc_comm_apply_preset: struct_size rules, field validation and pattern matching.
 */
#include "qc_abi_test.h"

/* ---- qc_policy_init (the macro) and qc_policy_init_sized ---------------- */

static void test_policy_init_null(void** state) {
  (void)state;
  QCT_INVALID(qc_policy_init_sized(NULL, sizeof(qc_policy_t)), "qc_policy_init_sized", "policy");
}

/* The pattern every C user writes: garbage on the stack, then init. */
static void test_policy_init_fills_defaults_over_garbage(void** state) {
  const qc_policy_t want = QC_POLICY_INIT;
  qc_policy_t p;
  (void)state;
  memset(&p, 0xA5, sizeof p);  /* struct_size is garbage too: it is not read */
  QCT_OK(qc_policy_init(&p));
  assert_int_equal(p.struct_size, sizeof(qc_policy_t));
  QCT_ASSERT_POLICY_EQUAL(&p, &want);
  /* the documented defaults, spelled out */
  assert_int_equal(p.codec, QC_CODEC_NONE);
  assert_int_equal(p.bits, 4);
  assert_int_equal(p.bucket_size, 128);
  assert_int_equal(p.rounding, QC_ROUND_AUTO);
  assert_int_equal(p.algorithm, QC_ALGO_AUTO);
  assert_int_equal(p.error_feedback, 0);
  assert_int_equal(p.group_size, 8);
  assert_true(p.topk_ratio == 0.01f);
  assert_int_equal(p.scale_update_period, 1);
  assert_int_equal(p.seed, 0);
  assert_int_equal(p.min_compress_bytes, 16384);
}

/* memset 0 then init: the caller's whole layout, not the first one. */
static void test_policy_init_after_memset_zero_is_the_whole_layout(void** state) {
  const qc_policy_t want = QC_POLICY_INIT;
  qc_policy_t p;
  (void)state;
  memset(&p, 0, sizeof p);
  QCT_OK(qc_policy_init(&p));
  assert_int_equal(p.struct_size, sizeof(qc_policy_t));
  QCT_ASSERT_POLICY_EQUAL(&p, &want);
  assert_int_equal(p.min_compress_bytes, 16384);
}

/* A program built against the first layout passes its (smaller) size. */
static void test_policy_init_sized_first_layout(void** state) {
  const qc_policy_t want = QC_POLICY_INIT;
  qc_policy_t p;
  size_t untouched;
  (void)state;
  memset(&p, 0xA5, sizeof p);
  QCT_OK(qc_policy_init_sized(&p, QCT_POLICY_V0_SIZE));
  assert_int_equal(p.struct_size, QCT_POLICY_V0_SIZE);
  QCT_ASSERT_POLICY_EQUAL(&p, &want);
  memset(&untouched, 0xA5, sizeof untouched);
  assert_memory_equal(&p.min_compress_bytes, &untouched, sizeof untouched);
}

static void test_policy_init_sized_too_small_writes_nothing(void** state) {
  qc_policy_t p, before;
  (void)state;
  memset(&p, 0x3C, sizeof p);
  before = p;
  QCT_INVALID(qc_policy_init_sized(&p, 1), "qc_policy_init_sized", "struct_size");
  QCT_INVALID(qc_policy_init_sized(&p, 0), "qc_policy_init_sized", "struct_size");
  QCT_INVALID(qc_policy_init_sized(&p, QCT_POLICY_V0_SIZE - 1), "qc_policy_init_sized",
              "struct_size");
  assert_memory_equal(&p, &before, sizeof p);
}

static void test_policy_init_sized_too_large(void** state) {
  qct_big_policy big;
  (void)state;
  memset(&big, 0, sizeof big);
  QCT_FAILS(qc_policy_init_sized(&big.policy, sizeof(qc_policy_t) + 8), QC_ERROR_VERSION,
            "qc_policy_init_sized", "struct_size");
}

/* "Only struct_size bytes are written." */
static void test_policy_init_writes_only_struct_size_bytes(void** state) {
  qct_big_policy big;
  size_t i;
  (void)state;
  memset(&big, 0x5A, sizeof big);
  QCT_OK(qc_policy_init_sized(&big.policy, sizeof(qc_policy_t)));
  for (i = 0; i < sizeof big.extra; ++i) assert_int_equal(big.extra[i], 0x5A);
}

/* ---- qc_comm_set_layer_policy / qc_comm_get_layer_policy: arguments ---------------- */

static void test_set_layer_policy_null_comm(void** state) {
  const qc_policy_t p = QC_POLICY_INIT;
  (void)state;
  QCT_INVALID(qc_comm_set_layer_policy(NULL, "*", &p), "qc_comm_set_layer_policy", "comm");
}

static void test_set_layer_policy_null_or_empty_pattern(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  const qc_policy_t p = QC_POLICY_INIT;
  QCT_INVALID(qc_comm_set_layer_policy(comm, NULL, &p), "qc_comm_set_layer_policy", "pattern");
  QCT_INVALID(qc_comm_set_layer_policy(comm, "", &p), "qc_comm_set_layer_policy", "pattern");
}

static void test_set_layer_policy_null_policy(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  QCT_INVALID(qc_comm_set_layer_policy(comm, "*", NULL), "qc_comm_set_layer_policy", "policy");
}

static qc_status_t call_set_layer_policy(qc_policy_t* p, void* ctx) {
  return qc_comm_set_layer_policy((qc_comm_t)ctx, "fc1.weight", p);
}

static void test_set_layer_policy_struct_size(void** state) {
  QCT_CHECK_POLICY_STRUCT_SIZES("qc_comm_set_layer_policy", call_set_layer_policy, *state);
}

static void test_set_layer_policy_invalid_fields(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  const qc_policy_t def = QC_POLICY_INIT;
  qc_policy_t got;
  QCT_CHECK_BAD_POLICY_FIELDS("qc_comm_set_layer_policy", call_set_layer_policy, comm);
  /* nothing was stored by the failed calls */
  got.struct_size = sizeof got;
  QCT_OK(qc_comm_get_layer_policy(comm, "fc1.weight", &got));
  QCT_ASSERT_POLICY_EQUAL(&got, &def);
}

/* The boundaries of every range are valid, and every known codec is accepted
 * by set (whether the codec is built only matters when a collective runs). */
static void test_set_layer_policy_accepts_boundary_values(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_policy_t p = QC_POLICY_INIT;
  int codec;
  p.bits = 1;
  QCT_OK(qc_comm_set_layer_policy(comm, "a", &p));
  p.bits = 8;
  p.bucket_size = 1;
  p.group_size = 1;
  p.topk_ratio = 1.0f;
  p.error_feedback = 1;
  p.rounding = QC_ROUND_STOCHASTIC;
  p.algorithm = QC_ALGO_NATIVE;
  p.scale_update_period = 1000;
  p.seed = UINT64_MAX;
  QCT_OK(qc_comm_set_layer_policy(comm, "b", &p));
  p.topk_ratio = 1e-6f;
  QCT_OK(qc_comm_set_layer_policy(comm, "c", &p));
  for (codec = QC_CODEC_NONE; codec <= QC_CODEC_NVFP4; ++codec) {
    p.codec = (qc_codec_t)codec;
    QCT_OK(qc_comm_set_layer_policy(comm, "d", &p));
  }
}

static void test_get_layer_policy_null_comm(void** state) {
  qc_policy_t p = QC_POLICY_INIT;
  (void)state;
  QCT_INVALID(qc_comm_get_layer_policy(NULL, "x", &p), "qc_comm_get_layer_policy", "comm");
}

static void test_get_layer_policy_null_policy(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  QCT_INVALID(qc_comm_get_layer_policy(comm, "x", NULL), "qc_comm_get_layer_policy", "policy");
}

static qc_status_t call_get_layer_policy(qc_policy_t* p, void* ctx) {
  return qc_comm_get_layer_policy((qc_comm_t)ctx, "x", p);
}

static void test_get_layer_policy_struct_size(void** state) {
  QCT_CHECK_POLICY_STRUCT_SIZES("qc_comm_get_layer_policy", call_get_layer_policy, *state);
}

/* ---- pattern matching ---------------------------------------------------- */

/* bits of the policy that `layer` resolves to */
static int resolved_bits(qc_comm_t comm, const char* layer) {
  qc_policy_t p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  QCT_OK(qc_comm_get_layer_policy(comm, layer, &p));
  return p.bits;
}

static void set_bits(qc_comm_t comm, const char* pattern, int bits) {
  qc_policy_t p = QC_POLICY_INIT;
  p.bits = bits;
  QCT_OK(qc_comm_set_layer_policy(comm, pattern, &p));
}

static void test_default_policy_is_policy_init(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  const qc_policy_t want = QC_POLICY_INIT;
  qc_policy_t got;
  memset(&got, 0x77, sizeof got);
  got.struct_size = sizeof got;
  QCT_OK(qc_comm_get_layer_policy(comm, NULL, &got));
  QCT_ASSERT_POLICY_EQUAL(&got, &want);
  memset(&got, 0x77, sizeof got);
  got.struct_size = sizeof got;
  QCT_OK(qc_comm_get_layer_policy(comm, "any.layer.name", &got));
  QCT_ASSERT_POLICY_EQUAL(&got, &want);
}

static void test_get_layer_policy_round_trips_every_field(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_policy_t want = QC_POLICY_INIT;
  qc_policy_t got;
  want.codec = QC_CODEC_QSGD;
  want.bits = 3;
  want.bucket_size = 512;
  want.rounding = QC_ROUND_STOCHASTIC;
  want.algorithm = QC_ALGO_RING;
  want.error_feedback = 1;
  want.group_size = 4;
  want.topk_ratio = 0.25f;
  want.scale_update_period = 7;
  want.seed = 0x0123456789ABCDEFull;
  QCT_OK(qc_comm_set_layer_policy(comm, "fc2.weight", &want));
  memset(&got, 0, sizeof got);
  got.struct_size = sizeof got;
  QCT_OK(qc_comm_get_layer_policy(comm, "fc2.weight", &got));
  QCT_ASSERT_POLICY_EQUAL(&got, &want);
}

static void test_null_layer_gives_star_policy(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  set_bits(comm, "*", 6);
  set_bits(comm, "fc1", 2);
  assert_int_equal(resolved_bits(comm, NULL), 6);
  assert_int_equal(resolved_bits(comm, "fc1"), 2);
}

static void test_exact_name_beats_globs(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  set_bits(comm, "fc1.weight", 8);
  set_bits(comm, "fc1.*", 3);
  set_bits(comm, "*", 2);
  set_bits(comm, "fc1.weigh?", 5); /* as many literals as can be, still a glob */
  assert_int_equal(resolved_bits(comm, "fc1.weight"), 8);
  assert_int_equal(resolved_bits(comm, "fc1.bias"), 3);
  assert_int_equal(resolved_bits(comm, "conv"), 2);
}

static void test_most_literal_glob_wins(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  set_bits(comm, "emb_*", 5);
  set_bits(comm, "*", 2);
  set_bits(comm, "*bias*", 6);
  assert_int_equal(resolved_bits(comm, "emb_0"), 5);
  assert_int_equal(resolved_bits(comm, "fc1.bias"), 6);
  assert_int_equal(resolved_bits(comm, "other"), 2);
  /* a longer glob set earlier still beats a shorter one set later */
  set_bits(comm, "e*", 7);
  assert_int_equal(resolved_bits(comm, "emb_0"), 5);
  assert_int_equal(resolved_bits(comm, "e0"), 7);
}

static void test_equally_specific_globs_last_set_wins(void** state) {
  qc_comm_t a = NULL;
  qc_comm_t b = NULL;
  (void)state;
  QCT_OK(qc_comm_create_local(1, &a));
  QCT_OK(qc_comm_create_local(1, &b));
  set_bits(a, "a*", 3);
  set_bits(a, "*b", 5);
  set_bits(b, "*b", 5);
  set_bits(b, "a*", 3);
  assert_int_equal(resolved_bits(a, "ab"), 5);
  assert_int_equal(resolved_bits(b, "ab"), 3);
  QCT_OK(qc_comm_destroy(a));
  QCT_OK(qc_comm_destroy(b));
}

static void test_question_mark_matches_one_character(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  set_bits(comm, "*", 2);
  set_bits(comm, "layer?", 7);
  assert_int_equal(resolved_bits(comm, "layer1"), 7);
  assert_int_equal(resolved_bits(comm, "layerX"), 7);
  assert_int_equal(resolved_bits(comm, "layer"), 2);
  assert_int_equal(resolved_bits(comm, "layer12"), 2);
}

static void test_star_matches_empty_run(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  set_bits(comm, "fc*.weight", 3);
  assert_int_equal(resolved_bits(comm, "fc.weight"), 3);
  assert_int_equal(resolved_bits(comm, "fc12.weight"), 3);
  assert_int_equal(resolved_bits(comm, "fc1.bias"), 4);
}

static void test_setting_pattern_again_replaces_it(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  set_bits(comm, "*", 3);
  set_bits(comm, "*", 5);
  assert_int_equal(resolved_bits(comm, NULL), 5);
  set_bits(comm, "emb", 6);
  set_bits(comm, "emb", 1);
  assert_int_equal(resolved_bits(comm, "emb"), 1);
}

/* ---- qc_comm_apply_preset ----------------------------------------------------- */

static void test_policy_preset_arguments(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_policy_t base = QC_POLICY_INIT;
  base.codec = QC_CODEC_MINMAX;
  QCT_INVALID(qc_comm_apply_preset(NULL, "cgx", &base), "qc_comm_apply_preset", "comm");
  QCT_INVALID(qc_comm_apply_preset(comm, NULL, &base), "qc_comm_apply_preset", "name");
  QCT_INVALID(qc_comm_apply_preset(comm, "no-such-preset", &base), "qc_comm_apply_preset", "name");
  assert_non_null(strstr(qc_last_error(), "known presets: cgx"));
}

static qc_status_t call_policy_preset(qc_policy_t* p, void* ctx) {
  return qc_comm_apply_preset((qc_comm_t)ctx, "cgx", p);
}

static void test_policy_preset_struct_size(void** state) {
  QCT_CHECK_POLICY_STRUCT_SIZES("qc_comm_apply_preset", call_policy_preset, *state);
}

static void test_policy_preset_invalid_fields(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  const qc_policy_t def = QC_POLICY_INIT;
  qc_policy_t got;
  QCT_CHECK_BAD_POLICY_FIELDS("qc_comm_apply_preset", call_policy_preset, comm);
  /* nothing was stored by the failed calls */
  got.struct_size = sizeof got;
  QCT_OK(qc_comm_get_layer_policy(comm, "fc1.bias", &got));
  QCT_ASSERT_POLICY_EQUAL(&got, &def);
  QCT_OK(qc_comm_get_layer_policy(comm, NULL, &got));
  QCT_ASSERT_POLICY_EQUAL(&got, &def);
}

static void test_policy_preset_cgx(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_policy_t base = QC_POLICY_INIT;
  qc_policy_t got;
  base.codec = QC_CODEC_MINMAX;
  base.bits = 4;
  base.min_compress_bytes = 0;
  QCT_OK(qc_comm_apply_preset(comm, "cgx", &base));
  got.struct_size = sizeof got;
  QCT_OK(qc_comm_get_layer_policy(comm, "encoder.0.attn.bias", &got));
  assert_int_equal(got.codec, QC_CODEC_NONE);
  QCT_OK(qc_comm_get_layer_policy(comm, "layer3.bn1.weight", &got));
  assert_int_equal(got.codec, QC_CODEC_NONE);
  QCT_OK(qc_comm_get_layer_policy(comm, "encoder.0.attn.weight", &got));
  assert_int_equal(got.codec, QC_CODEC_MINMAX);
  assert_int_equal(got.bits, 4);
  assert_int_equal(got.min_compress_bytes, 16384);
}

int main(void) {
#define WITH_COMM(t) cmocka_unit_test_setup_teardown(t, qct_setup_comm1, qct_teardown_comm)
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_policy_init_null),
      cmocka_unit_test(test_policy_init_fills_defaults_over_garbage),
      cmocka_unit_test(test_policy_init_after_memset_zero_is_the_whole_layout),
      cmocka_unit_test(test_policy_init_sized_first_layout),
      cmocka_unit_test(test_policy_init_sized_too_small_writes_nothing),
      cmocka_unit_test(test_policy_init_sized_too_large),
      cmocka_unit_test(test_policy_init_writes_only_struct_size_bytes),
      cmocka_unit_test(test_set_layer_policy_null_comm),
      WITH_COMM(test_set_layer_policy_null_or_empty_pattern),
      WITH_COMM(test_set_layer_policy_null_policy),
      WITH_COMM(test_set_layer_policy_struct_size),
      WITH_COMM(test_set_layer_policy_invalid_fields),
      WITH_COMM(test_set_layer_policy_accepts_boundary_values),
      cmocka_unit_test(test_get_layer_policy_null_comm),
      WITH_COMM(test_get_layer_policy_null_policy),
      WITH_COMM(test_get_layer_policy_struct_size),
      WITH_COMM(test_default_policy_is_policy_init),
      WITH_COMM(test_get_layer_policy_round_trips_every_field),
      WITH_COMM(test_null_layer_gives_star_policy),
      WITH_COMM(test_exact_name_beats_globs),
      WITH_COMM(test_most_literal_glob_wins),
      cmocka_unit_test(test_equally_specific_globs_last_set_wins),
      WITH_COMM(test_question_mark_matches_one_character),
      WITH_COMM(test_star_matches_empty_run),
      WITH_COMM(test_setting_pattern_again_replaces_it),
      WITH_COMM(test_policy_preset_arguments),
      WITH_COMM(test_policy_preset_struct_size),
      WITH_COMM(test_policy_preset_invalid_fields),
      WITH_COMM(test_policy_preset_cgx),
  };
#undef WITH_COMM
  return cmocka_run_group_tests_name("abi_policy", tests, NULL, NULL);
}

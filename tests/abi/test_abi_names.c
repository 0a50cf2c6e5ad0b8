/*
 * test_abi_names.c - the names of enum values (qc_codec_name,
 * qc_codec_from_name, ...): every value round-trips through its canonical
 * name, aliases are accepted, other spellings, unknown values and names are refused
 * with a message that lists the names.
 */
#define QC_EXPERIMENTAL_API /* tests qc_comm_adapt_policies and its structs */
#include "qc_abi_test.h"

typedef struct name_entry {
  int value;
  const char* name;
} name_entry;

/* The canonical names are API: pinned here as the enums' values are. */
static const name_entry k_codecs[] = {
    {QC_CODEC_NONE, "none"},     {QC_CODEC_FP16, "fp16"},
    {QC_CODEC_BF16, "bf16"},     {QC_CODEC_MINMAX, "minmax"},
    {QC_CODEC_QSGD, "qsgd"},     {QC_CODEC_GLOBAL_LINEAR, "global_linear"},
    {QC_CODEC_GLOBAL_EXP, "global_exp"}, {QC_CODEC_ONEBIT, "onebit"},
    {QC_CODEC_TOPK, "topk"},     {QC_CODEC_MXFP8, "mxfp8"},
    {QC_CODEC_MXFP8_E5M2, "mxfp8_e5m2"}, {QC_CODEC_MXFP6, "mxfp6"},
    {QC_CODEC_MXFP6_E3M2, "mxfp6_e3m2"}, {QC_CODEC_MXFP4, "mxfp4"},
    {QC_CODEC_MXINT8, "mxint8"}, {QC_CODEC_NVFP4, "nvfp4"}};
static const name_entry k_algorithms[] = {
    {QC_ALGO_AUTO, "auto"}, {QC_ALGO_RING, "ring"},
    {QC_ALGO_RECURSIVE_DOUBLING, "recursive_doubling"}, {QC_ALGO_SRA, "sra"},
    {QC_ALGO_TREE, "tree"}, {QC_ALGO_NATIVE, "native"}};
static const name_entry k_dtypes[] = {
    {QC_DTYPE_FLOAT32, "float32"}, {QC_DTYPE_FLOAT16, "float16"}, {QC_DTYPE_BFLOAT16, "bfloat16"}};
static const name_entry k_ops[] = {{QC_OP_SUM, "sum"}, {QC_OP_AVG, "avg"}};
static const name_entry k_roundings[] = {{QC_ROUND_NEAREST_EVEN, "nearest"},
                                         {QC_ROUND_STOCHASTIC, "stochastic"},
                                         {QC_ROUND_AUTO, "auto"}};
static const name_entry k_transports[] = {
    {QC_TRANSPORT_LOCAL, "local"}, {QC_TRANSPORT_MPI, "mpi"}, {QC_TRANSPORT_NCCL, "nccl"},
    {QC_TRANSPORT_CALLBACKS, "callbacks"}};
static const name_entry k_methods[] = {{QC_ADAPT_KMEANS, "kmeans"}, {QC_ADAPT_LINEAR, "linear"}};

/* One enum's functions behind one signature, so each test runs over all. */
typedef struct enum_api {
  const char* what; /* the from_name function, for messages */
  const name_entry* names;
  size_t count;
  const char* (*name_of)(int value);
  qc_status_t (*from_name)(const char* name, int* value);
} enum_api;

#define QCT_ENUM_API_(prefix, type)                                               \
  static const char* prefix##_name_of(int v) { return qc_##prefix##_name((type)v); } \
  static qc_status_t prefix##_from(const char* name, int* v) {                    \
    type t = (type)-7;                                                            \
    qc_status_t s = qc_##prefix##_from_name(name, &t);                            \
    *v = (int)t;                                                                  \
    return s;                                                                     \
  }
QCT_ENUM_API_(codec, qc_codec_t)
QCT_ENUM_API_(algorithm, qc_algorithm_t)
QCT_ENUM_API_(dtype, qc_dtype_t)
QCT_ENUM_API_(reduce_op, qc_reduce_op_t)
QCT_ENUM_API_(rounding, qc_rounding_t)
QCT_ENUM_API_(transport, qc_transport_t)
QCT_ENUM_API_(adapt_method, qc_adapt_method_t)

#define QCT_N(a) (sizeof(a) / sizeof((a)[0]))
static const enum_api k_enums[] = {
    {"qc_codec_from_name", k_codecs, QCT_N(k_codecs), codec_name_of, codec_from},
    {"qc_algorithm_from_name", k_algorithms, QCT_N(k_algorithms), algorithm_name_of,
     algorithm_from},
    {"qc_dtype_from_name", k_dtypes, QCT_N(k_dtypes), dtype_name_of, dtype_from},
    {"qc_reduce_op_from_name", k_ops, QCT_N(k_ops), reduce_op_name_of, reduce_op_from},
    {"qc_rounding_from_name", k_roundings, QCT_N(k_roundings), rounding_name_of, rounding_from},
    {"qc_transport_from_name", k_transports, QCT_N(k_transports), transport_name_of,
     transport_from},
    {"qc_adapt_method_from_name", k_methods, QCT_N(k_methods), adapt_method_name_of,
     adapt_method_from},
};

static void test_every_value_round_trips(void** state) {
  size_t e, i;
  (void)state;
  for (e = 0; e < QCT_N(k_enums); ++e) {
    for (i = 0; i < k_enums[e].count; ++i) {
      const name_entry* n = &k_enums[e].names[i];
      int back = -1;
      const char* name = k_enums[e].name_of(n->value);
      assert_non_null(name);
      assert_string_equal(name, n->name);
      /* a static string: the same pointer every time */
      assert_ptr_equal(k_enums[e].name_of(n->value), name);
      QCT_OK(k_enums[e].from_name(name, &back));
      assert_int_equal(back, n->value);
    }
  }
}

static void test_unknown_values_have_no_name(void** state) {
  size_t e;
  (void)state;
  for (e = 0; e < QCT_N(k_enums); ++e) {
    assert_null(k_enums[e].name_of((int)k_enums[e].count));
    assert_null(k_enums[e].name_of(-1));
    assert_null(k_enums[e].name_of(1000000));
  }
}

static void test_aliases_and_case(void** state) {
  qc_algorithm_t a = QC_ALGO_AUTO;
  qc_dtype_t d = QC_DTYPE_FLOAT32;
  qc_rounding_t r = QC_ROUND_STOCHASTIC;
  qc_codec_t c = QC_CODEC_NONE;
  (void)state;
  QCT_OK(qc_algorithm_from_name("rd", &a));
  assert_int_equal(a, QC_ALGO_RECURSIVE_DOUBLING);
  QCT_OK(qc_dtype_from_name("half", &d));
  assert_int_equal(d, QC_DTYPE_FLOAT16);
  QCT_OK(qc_dtype_from_name("bf16", &d));
  assert_int_equal(d, QC_DTYPE_BFLOAT16);
  QCT_OK(qc_dtype_from_name("float", &d));
  assert_int_equal(d, QC_DTYPE_FLOAT32);
  QCT_OK(qc_rounding_from_name("nearest_even", &r));
  assert_int_equal(r, QC_ROUND_NEAREST_EVEN);
  /* names are spelled exactly, as the QC_* environment takes them */
  QCT_INVALID(qc_codec_from_name("MinMax", &c), "qc_codec_from_name", "name");
  QCT_INVALID(qc_algorithm_from_name("SRA", &a), "qc_algorithm_from_name", "name");
  assert_int_equal(c, QC_CODEC_NONE);
  assert_int_equal(a, QC_ALGO_RECURSIVE_DOUBLING);
}

static void test_unknown_names_are_refused_with_the_list(void** state) {
  size_t e;
  (void)state;
  for (e = 0; e < QCT_N(k_enums); ++e) {
    int v = 12345;
    char msg[QCT_MSG_MAX];
    size_t i;
    QCT_INVALID(k_enums[e].from_name("no-such-name", &v), k_enums[e].what, "name");
    qct_copy_last_error(msg, sizeof msg);
    assert_non_null(strstr(msg, "\"no-such-name\""));
    for (i = 0; i < k_enums[e].count; ++i) assert_non_null(strstr(msg, k_enums[e].names[i].name));
    /* prefixes, empty names and names with a tail are not names */
    QCT_INVALID(k_enums[e].from_name("", &v), k_enums[e].what, "name");
    {
      char longer[64];
      snprintf(longer, sizeof longer, "%s ", k_enums[e].names[0].name);
      QCT_INVALID(k_enums[e].from_name(longer, &v), k_enums[e].what, "name");
      longer[strlen(longer) - 2] = '\0';
      if (longer[0] != '\0') QCT_INVALID(k_enums[e].from_name(longer, &v), k_enums[e].what, "name");
    }
  }
}

static void test_refused_calls_leave_the_output(void** state) {
  qc_codec_t c = QC_CODEC_TOPK;
  char msg[QCT_MSG_MAX];
  char weird[200];
  (void)state;
  QCT_INVALID(qc_codec_from_name(NULL, &c), "qc_codec_from_name", "name");
  QCT_INVALID(qc_codec_from_name("minmax", NULL), "qc_codec_from_name", "codec");
  /* control bytes are shown escaped and a long name is cut */
  memset(weird, 'x', sizeof weird - 1);
  weird[sizeof weird - 1] = '\0';
  weird[0] = '\n';
  QCT_INVALID(qc_codec_from_name(weird, &c), "qc_codec_from_name", "name");
  qct_copy_last_error(msg, sizeof msg);
  assert_non_null(strstr(msg, "\\x0a"));
  assert_null(strchr(msg, '\n'));
  assert_non_null(strstr(msg, "\"..."));
  assert_int_equal(c, QC_CODEC_TOPK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_value_round_trips),
      cmocka_unit_test(test_unknown_values_have_no_name),
      cmocka_unit_test(test_aliases_and_case),
      cmocka_unit_test(test_unknown_names_are_refused_with_the_list),
      cmocka_unit_test(test_refused_calls_leave_the_output),
  };
  return cmocka_run_group_tests_name("abi_names", tests, NULL, NULL);
}

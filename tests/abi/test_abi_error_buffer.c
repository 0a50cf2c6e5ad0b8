/*
 * test_abi_error_buffer.c - qc_error_buffer_*: creation, reset, norm and the
 * checkpoint image (save/load), including damaged images.
 */
#include "qc_abi_test.h"

enum { COUNT = 16 };

typedef struct image {
  unsigned char* bytes;
  size_t size;
} image;

static image save_image(qc_error_buffer_t eb) {
  image img;
  size_t written = 0;
  img.size = 0;
  QCT_OK(qc_error_buffer_save(eb, NULL, 0, &img.size));
  assert_true(img.size > 0);
  img.bytes = (unsigned char*)malloc(img.size);
  assert_non_null(img.bytes);
  QCT_OK(qc_error_buffer_save(eb, img.bytes, img.size, &written));
  assert_int_equal(written, img.size);
  return img;
}

static double norm_of(qc_error_buffer_t eb) {
  double n = -1.0;
  QCT_OK(qc_error_buffer_norm(eb, &n));
  return n;
}

/* Residuals that are not all zero, made by the fp16 codec with error
 * feedback in qc_emulate_allreduce. Returns 0 (and leaves the buffer zero)
 * when this build lacks the codec. */
static int make_nonzero_residuals(qc_error_buffer_t eb) {
  float x[COUNT];
  float y[COUNT];
  const void* send[1];
  void* recv[1];
  qc_error_buffer_t ebs[1];
  qc_policy_t p = QC_POLICY_INIT;
  qc_status_t st;
  int i;
  for (i = 0; i < COUNT; ++i) x[i] = 1.0f + (float)(i + 1) * 1.0e-6f; /* not fp16 values */
  send[0] = x;
  recv[0] = y;
  ebs[0] = eb;
  p.codec = QC_CODEC_FP16;
  p.error_feedback = 1;
  p.min_compress_bytes = 0; /* COUNT floats: below the default threshold */
  st = qc_emulate_allreduce(1, send, recv, COUNT, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, 0, &p, ebs);
  if (st == QC_ERROR_UNSUPPORTED) return 0;
  QCT_STATUS(st, QC_SUCCESS);
  return 1;
}

/* ---- create / destroy ---------------------------------------------------- */

static void test_error_buffer_create_null_out(void** state) {
  (void)state;
  QCT_INVALID(qc_error_buffer_create(NULL, COUNT, NULL), "qc_error_buffer_create",
              "error_buffer");
}

static void test_error_buffer_create_huge_count(void** state) {
  qc_error_buffer_t eb = NULL;
  qc_status_t st;
  const char* msg;
  (void)state;
  st = qc_error_buffer_create(NULL, SIZE_MAX, &eb);
  if (st != QC_ERROR_INVALID_ARGUMENT && st != QC_ERROR_OUT_OF_MEMORY) {
    print_error("qc_error_buffer_create(SIZE_MAX) returned %s\n", qc_status_string(st));
    qc_error_buffer_destroy(eb);
    fail();
  }
  msg = qc_last_error();
  assert_non_null(msg);
  assert_non_null(strstr(msg, "qc_error_buffer_create"));
  st = qc_error_buffer_create(NULL, SIZE_MAX / 4 + 1, &eb);
  assert_true(st == QC_ERROR_INVALID_ARGUMENT || st == QC_ERROR_OUT_OF_MEMORY);
  assert_true(qc_last_error()[0] != '\0');
}

static void test_error_buffer_create_and_destroy(void** state) {
  qc_error_buffer_t eb = NULL;
  qc_error_buffer_t eb0 = NULL;
  qc_comm_t comm = (qc_comm_t)*state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &eb));
  assert_non_null(eb);
  QCT_OK(qc_error_buffer_destroy(eb));
  eb = NULL;
  QCT_OK(qc_error_buffer_create(comm, COUNT, &eb));
  assert_non_null(eb);
  QCT_OK(qc_error_buffer_destroy(eb));
  /* count may be 0 */
  QCT_OK(qc_error_buffer_create(NULL, 0, &eb0));
  assert_non_null(eb0);
  assert_true(norm_of(eb0) == 0.0);
  QCT_OK(qc_error_buffer_destroy(eb0));
}

static void test_error_buffer_destroy_null(void** state) {
  (void)state;
  QCT_OK(qc_error_buffer_destroy(NULL));
}

/* ---- reset / norm -------------------------------------------------------- */

static void test_error_buffer_reset_and_norm_null(void** state) {
  qc_error_buffer_t eb = NULL;
  double n = 0.0;
  (void)state;
  QCT_INVALID(qc_error_buffer_reset(NULL), "qc_error_buffer_reset", "error_buffer");
  QCT_INVALID(qc_error_buffer_norm(NULL, &n), "qc_error_buffer_norm", "error_buffer");
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &eb));
  QCT_INVALID(qc_error_buffer_norm(eb, NULL), "qc_error_buffer_norm", "l2_norm");
  QCT_OK(qc_error_buffer_destroy(eb));
}

static void test_error_buffer_new_norm_is_zero(void** state) {
  qc_error_buffer_t eb = NULL;
  (void)state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &eb));
  assert_true(norm_of(eb) == 0.0);
  QCT_OK(qc_error_buffer_reset(eb));
  assert_true(norm_of(eb) == 0.0);
  QCT_OK(qc_error_buffer_destroy(eb));
}

static void test_error_buffer_reset_clears_residuals(void** state) {
  qc_error_buffer_t eb = NULL;
  (void)state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &eb));
  if (!make_nonzero_residuals(eb)) {
    QCT_OK(qc_error_buffer_destroy(eb));
    skip(); /* needs the fp16 codec */
  }
  assert_true(norm_of(eb) > 0.0);
  QCT_OK(qc_error_buffer_reset(eb));
  assert_true(norm_of(eb) == 0.0);
  QCT_OK(qc_error_buffer_destroy(eb));
}

/* ---- save ---------------------------------------------------------------- */

static void test_error_buffer_save_arguments(void** state) {
  qc_error_buffer_t eb = NULL;
  size_t size = 0;
  unsigned char dst[4096];
  (void)state;
  QCT_INVALID(qc_error_buffer_save(NULL, dst, sizeof dst, &size), "qc_error_buffer_save",
              "error_buffer");
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &eb));
  QCT_INVALID(qc_error_buffer_save(eb, dst, sizeof dst, NULL), "qc_error_buffer_save", "size");
  QCT_OK(qc_error_buffer_destroy(eb));
}

static void test_error_buffer_save_size_query(void** state) {
  qc_error_buffer_t eb = NULL;
  size_t size = 0;
  size_t size2 = 0;
  (void)state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &eb));
  QCT_OK(qc_error_buffer_save(eb, NULL, 0, &size));
  assert_true(size > 0);
  /* capacity is ignored when dst is NULL */
  QCT_OK(qc_error_buffer_save(eb, NULL, 12345, &size2));
  assert_int_equal(size2, size);
  QCT_OK(qc_error_buffer_destroy(eb));
}

static void test_error_buffer_save_capacity_too_small(void** state) {
  qc_error_buffer_t eb = NULL;
  size_t need = 0;
  size_t got = 0;
  unsigned char* dst;
  (void)state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &eb));
  QCT_OK(qc_error_buffer_save(eb, NULL, 0, &need));
  dst = (unsigned char*)malloc(need);
  assert_non_null(dst);
  QCT_INVALID(qc_error_buffer_save(eb, dst, need - 1, &got), "qc_error_buffer_save",
              "capacity");
  QCT_INVALID(qc_error_buffer_save(eb, dst, 0, &got), "qc_error_buffer_save", "capacity");
  free(dst);
  QCT_OK(qc_error_buffer_destroy(eb));
}

/* ---- load ---------------------------------------------------------------- */

static void test_error_buffer_save_load_round_trip(void** state) {
  qc_error_buffer_t a = NULL;
  qc_error_buffer_t b = NULL;
  image ia;
  image ib;
  (void)state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &a));
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &b));
  ia = save_image(a);
  QCT_OK(qc_error_buffer_load(b, ia.bytes, ia.size));
  assert_true(norm_of(b) == 0.0);
  /* the same state serialises to the same bytes */
  ib = save_image(b);
  assert_int_equal(ib.size, ia.size);
  assert_memory_equal(ib.bytes, ia.bytes, ia.size);
  free(ia.bytes);
  free(ib.bytes);
  QCT_OK(qc_error_buffer_destroy(a));
  QCT_OK(qc_error_buffer_destroy(b));
}

static void test_error_buffer_round_trip_keeps_residuals(void** state) {
  qc_error_buffer_t a = NULL;
  qc_error_buffer_t b = NULL;
  image ia;
  image ib;
  (void)state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &a));
  if (!make_nonzero_residuals(a)) {
    QCT_OK(qc_error_buffer_destroy(a));
    skip(); /* needs the fp16 codec */
  }
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &b));
  ia = save_image(a);
  QCT_OK(qc_error_buffer_load(b, ia.bytes, ia.size));
  assert_true(norm_of(b) == norm_of(a));
  assert_true(norm_of(b) > 0.0);
  ib = save_image(b);
  assert_int_equal(ib.size, ia.size);
  assert_memory_equal(ib.bytes, ia.bytes, ia.size);
  free(ia.bytes);
  free(ib.bytes);
  QCT_OK(qc_error_buffer_destroy(a));
  QCT_OK(qc_error_buffer_destroy(b));
}

static void test_error_buffer_load_null_arguments(void** state) {
  qc_error_buffer_t eb = NULL;
  image img;
  (void)state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &eb));
  img = save_image(eb);
  QCT_INVALID(qc_error_buffer_load(eb, NULL, img.size), "qc_error_buffer_load", "src");
  QCT_INVALID(qc_error_buffer_load(NULL, img.bytes, img.size), "qc_error_buffer_load",
              "error_buffer");
  free(img.bytes);
  QCT_OK(qc_error_buffer_destroy(eb));
}

static void test_error_buffer_load_truncated(void** state) {
  qc_error_buffer_t eb = NULL;
  image img;
  size_t len;
  (void)state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &eb));
  img = save_image(eb);
  /* every proper prefix, copied so that ASan sees reads past its end */
  for (len = 0; len < img.size; ++len) {
    unsigned char* prefix = (unsigned char*)malloc(len > 0 ? len : 1);
    qc_status_t st;
    assert_non_null(prefix);
    memcpy(prefix, img.bytes, len);
    st = qc_error_buffer_load(eb, prefix, len);
    free(prefix);
    /* an empty image may also be refused as an invalid size */
    if (st != QC_ERROR_CORRUPT_DATA && !(len == 0 && st == QC_ERROR_INVALID_ARGUMENT)) {
      print_error("load of the first %zu of %zu bytes gave %s\n", len, img.size,
                  qc_status_string(st));
      fail();
    }
  }
  qct_check_message("qc_error_buffer_load", NULL, __FILE__, __LINE__);
  free(img.bytes);
  QCT_OK(qc_error_buffer_destroy(eb));
}

/* A flipped byte in the payload (the last COUNT*4 bytes or fewer) must be
 * refused as CORRUPT_DATA. Elsewhere (header fields such as the count or the
 * version) MISMATCH or VERSION are also acceptable, and a byte the format does
 * not use may be ignored, as long as what is loaded is exactly the undamaged
 * image. The buffer is unchanged on failure. */
static void test_error_buffer_load_flipped_byte(void** state) {
  qc_error_buffer_t src = NULL;
  qc_error_buffer_t dst = NULL;
  image img;
  size_t pos;
  size_t payload;
  double before;
  (void)state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &src));
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &dst));
  (void)make_nonzero_residuals(dst); /* so "unchanged" means something */
  before = norm_of(dst);
  img = save_image(src);
  payload = COUNT * sizeof(float) < img.size ? COUNT * sizeof(float) : img.size;
  for (pos = 0; pos < img.size; ++pos) {
    qc_status_t st;
    int in_payload = pos >= img.size - payload;
    img.bytes[pos] ^= 0x5Au;
    st = qc_error_buffer_load(dst, img.bytes, img.size);
    img.bytes[pos] ^= 0x5Au;
    if (st == QC_SUCCESS && !in_payload) {
      image now = save_image(dst);
      int same = now.size == img.size && memcmp(now.bytes, img.bytes, img.size) == 0;
      free(now.bytes);
      if (!same) {
        print_error("flipped byte %zu of %zu: load succeeded with different contents\n", pos,
                    img.size);
        fail();
      }
      before = norm_of(dst);
      continue;
    }
    if (in_payload ? st != QC_ERROR_CORRUPT_DATA
                   : (st != QC_ERROR_CORRUPT_DATA && st != QC_ERROR_MISMATCH &&
                      st != QC_ERROR_VERSION)) {
      print_error("flipped byte %zu of %zu: load gave %s\n", pos, img.size,
                  qc_status_string(st));
      fail();
    }
    if (norm_of(dst) != before) {
      print_error("flipped byte %zu: the buffer changed although load failed\n", pos);
      fail();
    }
  }
  free(img.bytes);
  QCT_OK(qc_error_buffer_destroy(src));
  QCT_OK(qc_error_buffer_destroy(dst));
}

static void test_error_buffer_load_different_count(void** state) {
  qc_error_buffer_t big = NULL;
  qc_error_buffer_t small = NULL;
  image img;
  (void)state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &big));
  QCT_OK(qc_error_buffer_create(NULL, COUNT / 2, &small));
  img = save_image(big);
  QCT_FAILS(qc_error_buffer_load(small, img.bytes, img.size), QC_ERROR_MISMATCH,
            "qc_error_buffer_load", NULL);
  free(img.bytes);
  img = save_image(small);
  QCT_FAILS(qc_error_buffer_load(big, img.bytes, img.size), QC_ERROR_MISMATCH,
            "qc_error_buffer_load", NULL);
  free(img.bytes);
  QCT_OK(qc_error_buffer_destroy(big));
  QCT_OK(qc_error_buffer_destroy(small));
}

static void test_error_buffer_load_garbage(void** state) {
  qc_error_buffer_t eb = NULL;
  image img;
  unsigned char* junk;
  size_t i;
  (void)state;
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &eb));
  img = save_image(eb);
  junk = (unsigned char*)malloc(img.size);
  assert_non_null(junk);
  memset(junk, 0, img.size);
  QCT_FAILS(qc_error_buffer_load(eb, junk, img.size), QC_ERROR_CORRUPT_DATA,
            "qc_error_buffer_load", NULL);
  for (i = 0; i < img.size; ++i) junk[i] = (unsigned char)(i * 131u + 7u);
  QCT_FAILS(qc_error_buffer_load(eb, junk, img.size), QC_ERROR_CORRUPT_DATA,
            "qc_error_buffer_load", NULL);
  free(junk);
  free(img.bytes);
  QCT_OK(qc_error_buffer_destroy(eb));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_error_buffer_create_null_out),
      cmocka_unit_test(test_error_buffer_create_huge_count),
      cmocka_unit_test_setup_teardown(test_error_buffer_create_and_destroy, qct_setup_comm1,
                                      qct_teardown_comm),
      cmocka_unit_test(test_error_buffer_destroy_null),
      cmocka_unit_test(test_error_buffer_reset_and_norm_null),
      cmocka_unit_test(test_error_buffer_new_norm_is_zero),
      cmocka_unit_test(test_error_buffer_reset_clears_residuals),
      cmocka_unit_test(test_error_buffer_save_arguments),
      cmocka_unit_test(test_error_buffer_save_size_query),
      cmocka_unit_test(test_error_buffer_save_capacity_too_small),
      cmocka_unit_test(test_error_buffer_save_load_round_trip),
      cmocka_unit_test(test_error_buffer_round_trip_keeps_residuals),
      cmocka_unit_test(test_error_buffer_load_null_arguments),
      cmocka_unit_test(test_error_buffer_load_truncated),
      cmocka_unit_test(test_error_buffer_load_flipped_byte),
      cmocka_unit_test(test_error_buffer_load_different_count),
      cmocka_unit_test(test_error_buffer_load_garbage),
  };
  return cmocka_run_group_tests_name("abi_error_buffer", tests, NULL, NULL);
}

/*
 * test_abi_codec.c - qc_codec_encoded_size, qc_codec_encode and qc_codec_decode on their own:
 * arguments, the codec-none round trip in every dtype, and damaged messages.
 */
#include "qc_abi_test.h"

#define HEADER_BYTES 32u
#define F32 QC_DTYPE_FLOAT32

enum { N = 37 }; /* odd, and a value no other header field is likely to hold */

typedef struct message {
  unsigned char* bytes;
  size_t size;
} message;

static void fill_f32(float* x, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) x[i] = (float)((double)i * 0.37 - 5.0) * (i % 3 == 0 ? 1e-3f : 7.0f);
}

static message encode_none(const void* src, size_t count, qc_dtype_t dtype) {
  const qc_policy_t p = QC_POLICY_INIT;
  message m;
  size_t cap = 0;
  QCT_OK(qc_codec_encoded_size(&p, count, &cap));
  m.bytes = (unsigned char*)malloc(cap);
  assert_non_null(m.bytes);
  m.size = 0;
  QCT_OK(qc_codec_encode(&p, src, count, dtype, m.bytes, cap, &m.size));
  assert_true(m.size <= cap);
  return m;
}

/* decode a copy of the first `size` bytes of m (exact allocation: ASan sees
 * any read past the end) */
static qc_status_t decode_prefix(const message* m, size_t size, void* dst, size_t count,
                                 qc_dtype_t dtype) {
  unsigned char* copy = (unsigned char*)malloc(size > 0 ? size : 1);
  qc_status_t st;
  assert_non_null(copy);
  memcpy(copy, m->bytes, size);
  st = qc_codec_decode(copy, size, dst, count, dtype);
  free(copy);
  return st;
}

static uint64_t read_le(const unsigned char* p, size_t width) {
  uint64_t v = 0;
  size_t i;
  for (i = 0; i < width; ++i) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void write_le(unsigned char* p, size_t width, uint64_t v) {
  size_t i;
  for (i = 0; i < width; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

/* Offset of a little-endian header field (4 or 8 bytes, aligned) holding
 * `value`, after the magic; -1 when there is none. */
static int find_header_field(const unsigned char* hdr, uint64_t value, size_t* width) {
  size_t off;
  for (off = 4; off + 8 <= HEADER_BYTES; off += 8) {
    if (read_le(hdr + off, 8) == value) {
      *width = 8;
      return (int)off;
    }
  }
  for (off = 4; off + 4 <= HEADER_BYTES; off += 4) {
    if (read_le(hdr + off, 4) == value) {
      *width = 4;
      return (int)off;
    }
  }
  return -1;
}

/* ---- qc_codec_encoded_size ----------------------------------------------------- */

static void test_encoded_size_null_arguments(void** state) {
  const qc_policy_t p = QC_POLICY_INIT;
  size_t n = 0;
  (void)state;
  QCT_INVALID(qc_codec_encoded_size(NULL, 10, &n), "qc_codec_encoded_size", "policy");
  QCT_INVALID(qc_codec_encoded_size(&p, 10, NULL), "qc_codec_encoded_size", "max_bytes");
}

static qc_status_t call_encoded_size(qc_policy_t* p, void* ctx) {
  size_t n = 0;
  (void)ctx;
  return qc_codec_encoded_size(p, 10, &n);
}

static void test_encoded_size_struct_size(void** state) {
  (void)state;
  QCT_CHECK_POLICY_STRUCT_SIZES("qc_codec_encoded_size", call_encoded_size, NULL);
}

static void test_encoded_size_invalid_fields(void** state) {
  (void)state;
  QCT_CHECK_BAD_POLICY_FIELDS("qc_codec_encoded_size", call_encoded_size, NULL);
}

static void test_encoded_size_codec_none(void** state) {
  const qc_policy_t p = QC_POLICY_INIT;
  static const size_t counts[] = {0, 1, 37, 1000, 123457};
  size_t i;
  (void)state;
  for (i = 0; i < sizeof counts / sizeof counts[0]; ++i) {
    size_t n = 0;
    QCT_OK(qc_codec_encoded_size(&p, counts[i], &n));
    assert_int_equal(n, HEADER_BYTES + 4 * counts[i]);
  }
}

static void test_encoded_size_count_overflow(void** state) {
  const qc_policy_t p = QC_POLICY_INIT;
  size_t n = 0;
  (void)state;
  QCT_INVALID(qc_codec_encoded_size(&p, SIZE_MAX / 2, &n), "qc_codec_encoded_size", "count");
  QCT_INVALID(qc_codec_encoded_size(&p, SIZE_MAX, &n), "qc_codec_encoded_size", "count");
}

/* ---- qc_codec_encode: arguments ------------------------------------------------ */

static void test_encode_null_arguments(void** state) {
  const qc_policy_t p = QC_POLICY_INIT;
  float x[N];
  unsigned char dst[HEADER_BYTES + 4 * N];
  size_t w = 0;
  (void)state;
  fill_f32(x, N);
  QCT_INVALID(qc_codec_encode(NULL, x, N, F32, dst, sizeof dst, &w), "qc_codec_encode", "policy");
  QCT_INVALID(qc_codec_encode(&p, NULL, N, F32, dst, sizeof dst, &w), "qc_codec_encode", "src");
  QCT_INVALID(qc_codec_encode(&p, x, N, F32, NULL, sizeof dst, &w), "qc_codec_encode", "dst");
  QCT_INVALID(qc_codec_encode(&p, x, N, F32, dst, sizeof dst, NULL), "qc_codec_encode", "written");
}

static void test_encode_bad_dtype_and_count(void** state) {
  const qc_policy_t p = QC_POLICY_INIT;
  float x[N];
  unsigned char dst[HEADER_BYTES + 4 * N];
  size_t w = 0;
  (void)state;
  fill_f32(x, N);
  QCT_INVALID(qc_codec_encode(&p, x, N, (qc_dtype_t)7, dst, sizeof dst, &w), "qc_codec_encode", "dtype");
  QCT_INVALID(qc_codec_encode(&p, x, SIZE_MAX / 2, F32, dst, sizeof dst, &w), "qc_codec_encode", "count");
}

typedef struct encode_ctx {
  float x[N];
  unsigned char dst[HEADER_BYTES + 4 * N];
} encode_ctx;

static qc_status_t call_encode(qc_policy_t* p, void* ctx) {
  encode_ctx* c = (encode_ctx*)ctx;
  size_t w = 0;
  return qc_codec_encode(p, c->x, N, F32, c->dst, sizeof c->dst, &w);
}

static void test_encode_struct_size(void** state) {
  encode_ctx c;
  (void)state;
  fill_f32(c.x, N);
  QCT_CHECK_POLICY_STRUCT_SIZES("qc_codec_encode", call_encode, &c);
}

static void test_encode_invalid_fields(void** state) {
  encode_ctx c;
  (void)state;
  fill_f32(c.x, N);
  QCT_CHECK_BAD_POLICY_FIELDS("qc_codec_encode", call_encode, &c);
}

static void test_encode_capacity_too_small(void** state) {
  const qc_policy_t p = QC_POLICY_INIT;
  float x[N];
  unsigned char* dst;
  size_t need = HEADER_BYTES + 4 * N;
  size_t w = 0;
  (void)state;
  fill_f32(x, N);
  dst = (unsigned char*)malloc(need);
  assert_non_null(dst);
  QCT_INVALID(qc_codec_encode(&p, x, N, F32, dst, need - 1, &w), "qc_codec_encode", "capacity");
  QCT_INVALID(qc_codec_encode(&p, x, N, F32, dst, HEADER_BYTES, &w), "qc_codec_encode", "capacity");
  QCT_INVALID(qc_codec_encode(&p, x, N, F32, dst, 0, &w), "qc_codec_encode", "capacity");
  QCT_OK(qc_codec_encode(&p, x, N, F32, dst, need, &w));
  assert_int_equal(w, need);
  free(dst);
}

/* ---- codec minmax --------------------------------------------------------- */

static size_t minmax_size(size_t count, int bits, int bucket) {
  size_t buckets = (count + (size_t)bucket - 1) / (size_t)bucket;
  return HEADER_BYTES + 8 * buckets + (count * (size_t)bits + 7) / 8;
}

static void test_encoded_size_minmax(void** state) {
  qc_policy_t p = QC_POLICY_INIT;
  static const size_t counts[] = {0, 1, 37, 128, 129, 1000, 123457};
  static const int bits[] = {1, 2, 3, 4, 8};
  size_t i;
  size_t b;
  (void)state;
  p.codec = QC_CODEC_MINMAX;
  for (b = 0; b < sizeof bits / sizeof bits[0]; ++b) {
    p.bits = bits[b];
    for (i = 0; i < sizeof counts / sizeof counts[0]; ++i) {
      size_t n = 0;
      QCT_OK(qc_codec_encoded_size(&p, counts[i], &n));
      assert_int_equal(n, minmax_size(counts[i], p.bits, p.bucket_size));
    }
  }
}

/* Nearest rounding: every value within half a step of its bucket's grid,
 * min and max exact. */
static void test_encode_minmax_round_trip(void** state) {
  qc_policy_t p = QC_POLICY_INIT;
  float x[N];
  float y[N];
  unsigned char dst[4096];
  size_t w = 0;
  size_t i;
  float lo = 0.0f;
  float hi = 0.0f;
  float step;
  (void)state;
  fill_f32(x, N);
  p.codec = QC_CODEC_MINMAX;
  p.bits = 4;
  p.bucket_size = 64; /* one bucket */
  QCT_OK(qc_codec_encode(&p, x, N, F32, dst, sizeof dst, &w));
  assert_int_equal(w, minmax_size(N, 4, 64));
  assert_memory_equal(dst, "QCWF", 4);
  memset(y, 0, sizeof y);
  QCT_OK(qc_codec_decode(dst, w, y, N, F32));
  lo = hi = x[0];
  for (i = 1; i < N; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
  }
  step = (hi - lo) / 15.0f;
  for (i = 0; i < N; ++i) {
    float err = x[i] - y[i];
    if (err < 0) err = -err;
    if (err > step * 0.5f * 1.0001f + 1e-6f) {
      print_error("element %zu: %g decoded as %g (step %g)\n", i, (double)x[i], (double)y[i],
                  (double)step);
      fail();
    }
  }
  /* wrong count, truncated message */
  QCT_FAILS(qc_codec_decode(dst, w, y, N + 1, F32), QC_ERROR_MISMATCH, "qc_codec_decode", "count");
  QCT_FAILS(qc_codec_decode(dst, w - 1, y, N, F32), QC_ERROR_CORRUPT_DATA, "qc_codec_decode", NULL);
}

/* ---- round trips --------------------------------------------------------- */

static void test_round_trip_float32(void** state) {
  float x[N];
  float y[N];
  message m;
  (void)state;
  fill_f32(x, N);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1e-40f; /* subnormal */
  x[3] = INFINITY;
  x[4] = -INFINITY;
  x[5] = 3.4028235e38f;
  m = encode_none(x, N, F32);
  assert_int_equal(m.size, HEADER_BYTES + 4 * N);
  assert_memory_equal(m.bytes, "QCWF", 4);
  memset(y, 0xFF, sizeof y);
  QCT_OK(qc_codec_decode(m.bytes, m.size, y, N, F32));
  assert_memory_equal(y, x, sizeof x);
  free(m.bytes);
}

static void run_half_round_trip(qc_dtype_t dtype) {
  uint16_t x[N];
  uint16_t y[N];
  size_t i;
  message m;
  /* finite values in both formats (exponent field never all ones), both signs;
   * NaN payloads are not compared: converting may quiet a signalling NaN */
  for (i = 0; i < N; ++i) {
    x[i] = (uint16_t)((0x0351u * (unsigned)i) % 0x7800u);
    if (i % 2 == 1) x[i] = (uint16_t)(x[i] | 0x8000u);
  }
  x[0] = 0x0000u;
  x[1] = 0x8000u; /* -0 */
  x[2] = 0x0001u; /* smallest subnormal */
  x[3] = dtype == QC_DTYPE_FLOAT16 ? 0x7C00u : 0x7F80u; /* +inf */
  x[4] = dtype == QC_DTYPE_FLOAT16 ? QCT_FP16_ONE : QCT_BF16_ONE;
  m = encode_none(x, N, dtype);
  /* codec none sends the input dtype unchanged: 2 bytes a value */
  assert_int_equal(m.size, HEADER_BYTES + 2 * N);
  memset(y, 0xFF, sizeof y);
  QCT_OK(qc_codec_decode(m.bytes, m.size, y, N, dtype));
  assert_memory_equal(y, x, sizeof x);
  free(m.bytes);
}

static void test_round_trip_float16(void** state) {
  (void)state;
  run_half_round_trip(QC_DTYPE_FLOAT16);
}

static void test_round_trip_bfloat16(void** state) {
  (void)state;
  run_half_round_trip(QC_DTYPE_BFLOAT16);
}

static void test_round_trip_zero_count(void** state) {
  float x[1] = {1.0f};
  float y[1] = {2.0f};
  message m;
  (void)state;
  m = encode_none(x, 0, F32);
  assert_int_equal(m.size, HEADER_BYTES);
  QCT_OK(qc_codec_decode(m.bytes, m.size, y, 0, F32));
  assert_true(y[0] == 2.0f);
  free(m.bytes);
}

/* ---- qc_codec_decode: arguments and damaged messages --------------------------- */

static void test_decode_null_arguments(void** state) {
  float x[N];
  float y[N];
  message m;
  (void)state;
  fill_f32(x, N);
  m = encode_none(x, N, F32);
  QCT_INVALID(qc_codec_decode(NULL, m.size, y, N, F32), "qc_codec_decode", "src");
  QCT_INVALID(qc_codec_decode(m.bytes, m.size, NULL, N, F32), "qc_codec_decode", "dst");
  QCT_INVALID(qc_codec_decode(m.bytes, m.size, y, N, (qc_dtype_t)7), "qc_codec_decode", "dtype");
  free(m.bytes);
}

static void test_decode_empty_message(void** state) {
  unsigned char empty[1] = {0};
  float y[N];
  qc_status_t st;
  (void)state;
  st = qc_codec_decode(empty, 0, y, N, F32);
  assert_true(st == QC_ERROR_INVALID_ARGUMENT || st == QC_ERROR_CORRUPT_DATA);
  qct_check_message("qc_codec_decode", NULL, __FILE__, __LINE__);
}

static void test_decode_wrong_count(void** state) {
  float x[N];
  float y[N + 1];
  message m;
  (void)state;
  fill_f32(x, N);
  m = encode_none(x, N, F32);
  QCT_FAILS(qc_codec_decode(m.bytes, m.size, y, N - 1, F32), QC_ERROR_MISMATCH, "qc_codec_decode", "count");
  QCT_FAILS(qc_codec_decode(m.bytes, m.size, y, N + 1, F32), QC_ERROR_MISMATCH, "qc_codec_decode", "count");
  free(m.bytes);
}

static void test_decode_truncated(void** state) {
  float x[N];
  float y[N];
  message m;
  size_t len;
  (void)state;
  fill_f32(x, N);
  m = encode_none(x, N, F32);
  for (len = 1; len < m.size; ++len) {
    qc_status_t st = decode_prefix(&m, len, y, N, F32);
    if (st != QC_ERROR_CORRUPT_DATA) {
      print_error("decode of the first %zu of %zu bytes gave %s\n", len, m.size,
                  qc_status_string(st));
      fail();
    }
  }
  qct_check_message("qc_codec_decode", NULL, __FILE__, __LINE__);
  free(m.bytes);
}

static void test_decode_bad_magic(void** state) {
  float x[N];
  float y[N];
  message m;
  size_t i;
  (void)state;
  fill_f32(x, N);
  m = encode_none(x, N, F32);
  assert_memory_equal(m.bytes, "QCWF", 4);
  for (i = 0; i < 4; ++i) {
    unsigned char saved = m.bytes[i];
    m.bytes[i] = (unsigned char)'X';
    QCT_FAILS(qc_codec_decode(m.bytes, m.size, y, N, F32), QC_ERROR_CORRUPT_DATA, "qc_codec_decode", NULL);
    m.bytes[i] = saved;
  }
  QCT_OK(qc_codec_decode(m.bytes, m.size, y, N, F32));
  free(m.bytes);
}

/* The payload length field claims one byte more or less than is there. */
static void test_decode_corrupt_payload_length(void** state) {
  float x[N];
  float y[N];
  message m;
  size_t width = 0;
  int off;
  (void)state;
  fill_f32(x, N);
  m = encode_none(x, N, F32);
  off = find_header_field(m.bytes, 4 * N, &width);
  if (off < 0) {
    print_error("no little-endian payload length field (%d) in the 32-byte header\n", 4 * N);
    fail();
  }
  write_le(m.bytes + off, width, 4 * N - 1);
  QCT_FAILS(qc_codec_decode(m.bytes, m.size, y, N, F32), QC_ERROR_CORRUPT_DATA, "qc_codec_decode", NULL);
  write_le(m.bytes + off, width, 4 * N + 1);
  QCT_FAILS(qc_codec_decode(m.bytes, m.size, y, N, F32), QC_ERROR_CORRUPT_DATA, "qc_codec_decode", NULL);
  write_le(m.bytes + off, width, UINT32_MAX);
  QCT_FAILS(qc_codec_decode(m.bytes, m.size, y, N, F32), QC_ERROR_CORRUPT_DATA, "qc_codec_decode", NULL);
  free(m.bytes);
}

/* The element count field says N+1 (and the caller asks for N+1): the
 * payload is too short for it. */
static void test_decode_corrupt_element_count(void** state) {
  float x[N];
  float y[N + 1];
  message m;
  size_t width = 0;
  int off;
  (void)state;
  fill_f32(x, N);
  m = encode_none(x, N, F32);
  off = find_header_field(m.bytes, N, &width);
  if (off < 0) {
    print_error("no little-endian element count field (%d) in the 32-byte header\n", N);
    fail();
  }
  write_le(m.bytes + off, width, N + 1);
  QCT_FAILS(qc_codec_decode(m.bytes, m.size, y, N + 1, F32), QC_ERROR_CORRUPT_DATA, "qc_codec_decode",
            NULL);
  free(m.bytes);
}

/* Any single damaged header byte: refused with a sensible status, or (for a
 * field codec none does not use) decoded to the right values. Never garbage. */
static void test_decode_any_damaged_header_byte(void** state) {
  float x[N];
  float y[N];
  message m;
  size_t pos;
  int v;
  (void)state;
  fill_f32(x, N);
  m = encode_none(x, N, F32);
  for (pos = 0; pos < HEADER_BYTES; ++pos) {
    static const unsigned char patterns[] = {0xFF, 0x01, 0x80};
    for (v = 0; v < 3; ++v) {
      unsigned char saved = m.bytes[pos];
      qc_status_t st;
      m.bytes[pos] ^= patterns[v];
      memset(y, 0, sizeof y);
      st = qc_codec_decode(m.bytes, m.size, y, N, F32);
      m.bytes[pos] = saved;
      if (st == QC_SUCCESS) {
        if (memcmp(y, x, sizeof x) != 0) {
          print_error("header byte %zu ^ 0x%02x: decode succeeded with wrong values\n", pos,
                      patterns[v]);
          fail();
        }
      } else if (st != QC_ERROR_CORRUPT_DATA && st != QC_ERROR_MISMATCH &&
                 st != QC_ERROR_VERSION && st != QC_ERROR_UNSUPPORTED) {
        print_error("header byte %zu ^ 0x%02x: decode gave %s\n", pos, patterns[v],
                    qc_status_string(st));
        fail();
      }
      if (pos < 4 && st != QC_ERROR_CORRUPT_DATA) {
        print_error("magic byte %zu damaged: decode gave %s\n", pos, qc_status_string(st));
        fail();
      }
    }
  }
  free(m.bytes);
}

static void test_decode_garbage(void** state) {
  unsigned char junk[HEADER_BYTES + 4 * N];
  float y[N];
  size_t i;
  (void)state;
  memset(junk, 0, sizeof junk);
  QCT_FAILS(qc_codec_decode(junk, sizeof junk, y, N, F32), QC_ERROR_CORRUPT_DATA, "qc_codec_decode", NULL);
  for (i = 0; i < sizeof junk; ++i) junk[i] = (unsigned char)(i * 131u + 7u);
  QCT_FAILS(qc_codec_decode(junk, sizeof junk, y, N, F32), QC_ERROR_CORRUPT_DATA, "qc_codec_decode", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_encoded_size_null_arguments),
      cmocka_unit_test(test_encoded_size_struct_size),
      cmocka_unit_test(test_encoded_size_invalid_fields),
      cmocka_unit_test(test_encoded_size_codec_none),
      cmocka_unit_test(test_encoded_size_count_overflow),
      cmocka_unit_test(test_encode_null_arguments),
      cmocka_unit_test(test_encode_bad_dtype_and_count),
      cmocka_unit_test(test_encode_struct_size),
      cmocka_unit_test(test_encode_invalid_fields),
      cmocka_unit_test(test_encode_capacity_too_small),
      cmocka_unit_test(test_encoded_size_minmax),
      cmocka_unit_test(test_encode_minmax_round_trip),
      cmocka_unit_test(test_round_trip_float32),
      cmocka_unit_test(test_round_trip_float16),
      cmocka_unit_test(test_round_trip_bfloat16),
      cmocka_unit_test(test_round_trip_zero_count),
      cmocka_unit_test(test_decode_null_arguments),
      cmocka_unit_test(test_decode_empty_message),
      cmocka_unit_test(test_decode_wrong_count),
      cmocka_unit_test(test_decode_truncated),
      cmocka_unit_test(test_decode_bad_magic),
      cmocka_unit_test(test_decode_corrupt_payload_length),
      cmocka_unit_test(test_decode_corrupt_element_count),
      cmocka_unit_test(test_decode_any_damaged_header_byte),
      cmocka_unit_test(test_decode_garbage),
  };
  return cmocka_run_group_tests_name("abi_codec", tests, NULL, NULL);
}

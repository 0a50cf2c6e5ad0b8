// fuzz_error_buffer_load: qc_error_buffer_load on untrusted checkpoint images.
//
// The input is an image (layout in src/core/error_buffer.h: "QCEB" header,
// FNV-1a checksum, float32 residuals). It is loaded as it is and, because a
// random image almost never carries the right checksum, also with its checksum
// recomputed, into fresh buffers of a few counts (the count the image
// announces, and one of 0, 1, 3), each made without a communicator (rank unknown) and for
// rank 0 of a 1-rank local communicator. Checked:
//  - the status is SUCCESS, CORRUPT_DATA or MISMATCH, and exactly the one a
//    reference model of the documented checks predicts (corrupt before
//    mismatch);
//  - on failure the buffer is unchanged (its image is that of a fresh buffer);
//  - on success the buffer's image is the loaded one (rank and group size
//    kept from the buffer when the image's rank is -1), and save -> load ->
//    save gives identical bytes.
// Seeds: tests/fuzz/corpus/fuzz_error_buffer_load (valid images).
#include <cstdint>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_common.h"

using namespace qc_fuzz;

namespace {

constexpr size_t kHeaderBytes = 56;
constexpr uint64_t kMaxCount = uint64_t{1} << 12;

uint64_t fnv1a64(const uint8_t* p, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
uint64_t image_checksum(const uint8_t* img, size_t size) {
  const uint64_t h = fnv1a64(img, 48, 0xcbf29ce484222325ull);
  return fnv1a64(img + kHeaderBytes, size - kHeaderBytes, h);
}
int32_t load_i32(const uint8_t* p) { return static_cast<int32_t>(static_cast<uint32_t>(load_le(p, 4))); }

qc_comm_t one_rank_comm() {
  static qc_comm_t comm = [] {
    qc_comm_t c = nullptr;
    QC_FUZZ_CHECK(qc_comm_create_local(1, &c) == QC_SUCCESS, "qc_comm_create_local(1)");
    return c;
  }();
  return comm;
}

// The status qc_error_buffer_load must give (qc.h, error_buffer.h).
qc_status_t expected_status(const uint8_t* img, size_t size, size_t buf_count, int buf_rank,
                            int buf_size) {
  if (size < kHeaderBytes || std::memcmp(img, "QCEB", 4) != 0 || load_le(img + 4, 4) != 2)
    return QC_ERROR_CORRUPT_DATA;
  const uint64_t count = load_le(img + 8, 8);
  if ((size - kHeaderBytes) % 4 != 0 || (size - kHeaderBytes) / 4 != count) return QC_ERROR_CORRUPT_DATA;
  if (image_checksum(img, size) != load_le(img + 48, 8)) return QC_ERROR_CORRUPT_DATA;
  const uint32_t flags = static_cast<uint32_t>(load_le(img + 44, 4));
  if ((flags & ~1u) != 0) return QC_ERROR_CORRUPT_DATA;
  const int32_t rank = load_i32(img + 16), gsize = load_i32(img + 20);
  if (rank < -1 || gsize < -1 || (rank >= 0 && rank >= gsize)) return QC_ERROR_CORRUPT_DATA;
  if (flags & 1u) {
    const int32_t algo = load_i32(img + 24), codec = load_i32(img + 28);
    if (rank < 0 || algo < 1 || algo > 5 ||
        ((codec < 0 || codec > QC_CODEC_NVFP4) && codec != 255))
      return QC_ERROR_CORRUPT_DATA;
  }
  if (count != buf_count) return QC_ERROR_MISMATCH;
  if (buf_rank >= 0 && rank >= 0 && (buf_rank != rank || buf_size != gsize)) return QC_ERROR_MISMATCH;
  return QC_SUCCESS;
}

std::vector<uint8_t> save(qc_error_buffer_t b) {
  size_t need = 0;
  QC_FUZZ_CHECK(qc_error_buffer_save(b, nullptr, 0, &need) == QC_SUCCESS, "size query");
  std::vector<uint8_t> out(need);
  size_t got = 0;
  QC_FUZZ_CHECK(qc_error_buffer_save(b, out.data(), out.size(), &got) == QC_SUCCESS && got == need,
                "qc_error_buffer_save");
  return out;
}

qc_error_buffer_t make_buffer(bool with_comm, size_t count) {
  qc_error_buffer_t b = nullptr;
  QC_FUZZ_CHECK(qc_error_buffer_create(with_comm ? one_rank_comm() : nullptr, count, &b) == QC_SUCCESS,
                "qc_error_buffer_create(%zu)", count);
  return b;
}

void load_one(const uint8_t* img, size_t size, bool with_comm, size_t count) {
  const int buf_rank = with_comm ? 0 : -1, buf_size = with_comm ? 1 : -1;
  qc_error_buffer_t b = make_buffer(with_comm, count);
  const std::vector<uint8_t> fresh = save(b);
  // exact-size heap copy: ASan sees any read past the image
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size]);
  if (size > 0) std::memcpy(copy.get(), img, size);
  const qc_status_t s = qc_error_buffer_load(b, copy.get(), size);
  const qc_status_t want = expected_status(img, size, count, buf_rank, buf_size);
  QC_FUZZ_CHECK(s == want, "load of %zu bytes into a %s buffer of %zu: %s, expected %s", size,
                with_comm ? "rank-0" : "no-comm", count, qc_status_string(s), qc_status_string(want));
  const std::vector<uint8_t> s1 = save(b);
  if (s != QC_SUCCESS) {
    QC_FUZZ_CHECK(s1 == fresh, "a failed load changed the buffer");
    qc_error_buffer_destroy(b);
    return;
  }
  // The buffer now holds the image (rank/size: the buffer's when the image's rank is -1).
  QC_FUZZ_CHECK(s1.size() == size, "saved %zu bytes after loading %zu", s1.size(), size);
  std::vector<uint8_t> want_img(img, img + size);
  bool changed = false;
  if (load_i32(img + 16) < 0) {
    store_le(want_img.data() + 16, 4, static_cast<uint32_t>(buf_rank));
    store_le(want_img.data() + 20, 4, static_cast<uint32_t>(buf_size));
    changed = true;
  }
  // A non-finite residual loads as 0 (docs/fidelity.md, "Residuals that
  // are dropped"): error feedback could never carry it.
  for (size_t at = kHeaderBytes; at + 4 <= size; at += 4) {
    float residual;
    std::memcpy(&residual, want_img.data() + at, 4);
    if (!std::isfinite(residual)) {
      store_le(want_img.data() + at, 4, 0);
      changed = true;
    }
  }
  if (changed) store_le(want_img.data() + 48, 8, image_checksum(want_img.data(), size));
  QC_FUZZ_CHECK(s1 == want_img, "the saved image differs from the loaded one");
  double norm = -1;
  QC_FUZZ_CHECK(qc_error_buffer_norm(b, &norm) == QC_SUCCESS, "qc_error_buffer_norm");
  // save -> load -> save into a fresh buffer of the same kind
  qc_error_buffer_t c = make_buffer(with_comm, count);
  QC_FUZZ_CHECK(qc_error_buffer_load(c, s1.data(), s1.size()) == QC_SUCCESS, "reloading a saved image");
  QC_FUZZ_CHECK(save(c) == s1, "save -> load -> save changed the bytes");
  qc_error_buffer_destroy(c);
  qc_error_buffer_destroy(b);
}

void load_all(const uint8_t* img, size_t size) {
  // The count the image announces, and one of 0, 1, 3 (chosen by the size).
  static const size_t kSmall[] = {0, 1, 3};
  std::vector<size_t> counts = {kSmall[size % 3]};
  if (size >= 16) {
    const uint64_t announced = load_le(img + 8, 8);
    if (announced <= kMaxCount && announced != counts[0]) counts.push_back(static_cast<size_t>(announced));
  }
  for (size_t count : counts)
    for (bool with_comm : {false, true}) load_one(img, size, with_comm, count);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  load_all(data, size);
  if (size >= kHeaderBytes) {
    std::vector<uint8_t> fixed(data, data + size);
    store_le(fixed.data() + 48, 8, image_checksum(fixed.data(), size));
    if (std::memcmp(fixed.data() + 48, data + 48, 8) != 0) load_all(fixed.data(), size);
  }
  return 0;
}

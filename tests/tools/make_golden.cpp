// make_golden: writes the golden wire-format vectors (tests/data/golden_*.bin)
// from the current library. Not part of the test run: run it by hand only
// when the wire format changes on purpose, and review the diff.
//
//   build/tests/unit/qc_make_golden tests/data
//
// Codecs this build does not have (QC_ERROR_UNSUPPORTED) are skipped.
#include <cstdio>
#include <string>
#include <vector>

#include "golden_cases.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int failures = 0;
  for (const auto& c : qc_golden::golden_cases()) {
    std::vector<uint8_t> msg;
    const qc_status_t s = qc_golden::golden_encode(c, &msg);
    if (s == QC_ERROR_UNSUPPORTED) {
      std::printf("skip  %s (%s)\n", c.file, qc_last_error());
      continue;
    }
    if (s != QC_SUCCESS) {
      std::fprintf(stderr, "FAIL  %s: %s: %s\n", c.file, qc_status_string(s), qc_last_error());
      ++failures;
      continue;
    }
    const std::string path = dir + "/" + c.file;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(msg.data(), 1, msg.size(), f) != msg.size()) {
      std::fprintf(stderr, "FAIL  cannot write %s\n", path.c_str());
      if (f) std::fclose(f);
      ++failures;
      continue;
    }
    std::fclose(f);
    std::printf("wrote %s (%zu bytes)\n", path.c_str(), msg.size());
  }
  return failures == 0 ? 0 : 1;
}

// QC_DEBUG's lines (issue 30 item 5): every line has one format (time, host,
// pid, tid, rank, level); info tells communicator creation with what the
// build can do, each layer's policy on first use, the algorithm AUTO chose
// and why, a layer's messages sent uncompressed, and failures of the group
// naming the peer; debug adds a line per call. This executable sets
// QC_DEBUG=debug and QC_DEBUG_FILE=<dir>/qc-log-%p.log before any qc call (qc
// reads them on its first line); each test is its own process (ctest), so
// it reads its own file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using qct::Group;
using qct::run_ranks;

const bool kLogToFile = [] {
  ::setenv("QC_DEBUG", "debug", 1);
  ::setenv("QC_DEBUG_FILE", QC_LOG_DIR "/qc-log-%p.log", 1);
  return true;
}();

// The lines this process has logged so far.
std::vector<std::string> log_lines() {
  std::string path = QC_LOG_DIR "/qc-log-" + std::to_string(static_cast<long>(::getpid())) + ".log";
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Lines that contain every one of `parts`.
size_t count_with(const std::vector<std::string>& lines, const std::vector<std::string>& parts) {
  size_t n = 0;
  for (const std::string& l : lines) {
    bool all = true;
    for (const std::string& p : parts) all = all && l.find(p) != std::string::npos;
    n += all ? 1 : 0;
  }
  return n;
}

std::string dump(const std::vector<std::string>& lines) {
  std::ostringstream os;
  for (const auto& l : lines) os << l << "\n";
  return os.str();
}

TEST(Log, InfoTellsCreationPoliciesAutoAndFallbackInOneFormat) {
  const int n = 3;
  Group g(n);
  ASSERT_TRUE(g.ok());
  qc_policy_t p = QC_POLICY_INIT;  // auto, min_compress_bytes 16384
  p.codec = QC_CODEC_MINMAX;
  p.bits = 8;
  ASSERT_EQ(g.set_policy("*", p), QC_SUCCESS);
  const size_t big = 65536, tiny = 1024;  // 256 KiB: SRA; 4 KiB: under min_compress_bytes
  run_ranks(n, [&](int r) {
    std::vector<float> x(big, 1.0f + r), y(big);
    for (int call = 0; call < 3; ++call) {
      EXPECT_EQ(qc_allreduce(g[r], x.data(), y.data(), big, QC_DTYPE_FLOAT32, QC_OP_SUM, "big",
                             nullptr, nullptr), QC_SUCCESS);
      EXPECT_EQ(qc_allreduce(g[r], x.data(), y.data(), tiny, QC_DTYPE_FLOAT32, QC_OP_SUM, "tiny",
                             nullptr, nullptr), QC_SUCCESS);
    }
  });
  const std::vector<std::string> lines = log_lines();
  ASSERT_FALSE(lines.empty());
  const std::regex format(R"(^qc \d\d:\d\d:\d\d\.\d{6} [^ :]+:\d+:\d+ \[(\d+|-)\] (warning|info|debug): .+$)");
  for (const std::string& l : lines) EXPECT_TRUE(std::regex_match(l, format)) << l;
  for (int r = 0; r < n; ++r) {
    const std::string rank = "[" + std::to_string(r) + "] info: ";
    const std::string of = "rank " + std::to_string(r) + " of 3";
    EXPECT_EQ(count_with(lines, {rank, "communicator created: transport local", of,
                                 "built with MPI", "CPU kernels"}), 1u) << dump(lines);
    // Once per layer, not per call.
    EXPECT_EQ(count_with(lines, {rank, "layer 'big' first used (allreduce): codec minmax"}), 1u)
        << dump(lines);
    EXPECT_EQ(count_with(lines, {rank, "layer 'big': algorithm auto chose sra for 262144 bytes "
                                       "on 3 ranks: 64 KiB per rank or more"}), 1u) << dump(lines);
    EXPECT_EQ(count_with(lines, {rank, "layer 'tiny': a message of 4096 bytes is under "
                                       "min_compress_bytes 16384: sent uncompressed"}), 1u)
        << dump(lines);
    // debug: a line per call
    EXPECT_EQ(count_with(lines, {"[" + std::to_string(r) + "] debug: allreduce of 65536 float32, "
                                 "layer 'big'"}), 3u) << dump(lines);
  }
}

TEST(Log, AFailureOfTheGroupIsLoggedNamingThePeer) {
  Group g(2, 0.3);
  ASSERT_TRUE(g.ok());
  std::vector<float> x(64, 1.0f), y(64);
  // Rank 1 never joins: rank 0 times out waiting for it.
  ASSERT_EQ(qc_allreduce(g[0], x.data(), y.data(), x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr,
                         nullptr, nullptr), QC_ERROR_TIMEOUT);
  const std::vector<std::string> lines = log_lines();
  EXPECT_EQ(count_with(lines, {"[0] info: QC_ERROR_TIMEOUT in qc_allreduce: ", "rank 1"}), 1u)
      << dump(lines);
}

TEST(Log, ArgumentErrorsAreTheCallersNotTheLogs) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(qc_allreduce(g[0], nullptr, nullptr, 4, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr,
                         nullptr), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(count_with(log_lines(), {"QC_ERROR_INVALID_ARGUMENT"}), 0u);
}

}  // namespace

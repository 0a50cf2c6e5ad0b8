// tools/common: the value parsers, the option-name spellings and the JSON
// text every tool writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "qc_tool_cli.h"
#include "qc_tool_json.h"
#include "qc_tool_parse.h"
#include "qc_tool_text.h"

namespace {

uint64_t size_of(const std::string& text) {
  uint64_t bytes = 0;
  std::string why;
  EXPECT_TRUE(qctool::parse_size(text, &bytes, &why)) << text << ": " << why;
  return bytes;
}

std::string size_error(const std::string& text) {
  uint64_t bytes = 12345;
  std::string why;
  EXPECT_FALSE(qctool::parse_size(text, &bytes, &why)) << text;
  EXPECT_EQ(bytes, 12345u) << text << ": a refused size must leave the value alone";
  return why;
}

TEST(ToolParseSize, SuffixesArePowersOf1024) {
  EXPECT_EQ(size_of("8"), 8u);
  EXPECT_EQ(size_of("8B"), 8u);
  EXPECT_EQ(size_of("64K"), 64u << 10);
  EXPECT_EQ(size_of("64kib"), 64u << 10);
  EXPECT_EQ(size_of("1M"), 1u << 20);
  EXPECT_EQ(size_of("3MB"), 3u << 20);
  EXPECT_EQ(size_of("2G"), 2ull << 30);
  EXPECT_EQ(size_of("0"), 0u);
  EXPECT_EQ(size_of("18446744073709551615"), std::numeric_limits<uint64_t>::max());
}

TEST(ToolParseSize, GarbageIsRefused) {
  for (const char* text : {"", "12Q", "K", "-1", "+8", " 8", "8 K", "1.5M", "1T", "0x10"}) {
    EXPECT_NE(size_error(text).find("suffix K, M or G"), std::string::npos) << text;
  }
}

TEST(ToolParseSize, OverflowIsRefused) {
  EXPECT_NE(size_error("18446744073709551616").find("too large"), std::string::npos);
  EXPECT_NE(size_error("17179869184G").find("too large"), std::string::npos);  // 2^34 G = 2^64
  EXPECT_EQ(size_of("17179869183G"), 17179869183ull << 30);
}

TEST(ToolParseInteger, RangeAndStrictness) {
  int v = -7;
  EXPECT_TRUE(qctool::parse_integer("1024", 1, 1024, &v));
  EXPECT_EQ(v, 1024);
  for (const char* text : {"0", "1025", "", "4x", " 4", "+4", "4.0", "99999999999"}) {
    v = -7;
    EXPECT_FALSE(qctool::parse_integer(text, 1, 1024, &v)) << text;
    EXPECT_EQ(v, -7) << text;
  }
  uint64_t seed = 0;
  EXPECT_TRUE(qctool::parse_integer("18446744073709551615", uint64_t{0},
                                    std::numeric_limits<uint64_t>::max(), &seed));
  EXPECT_EQ(seed, std::numeric_limits<uint64_t>::max());
  EXPECT_FALSE(qctool::parse_integer("-1", uint64_t{0}, uint64_t{10}, &seed));
}

TEST(ToolParseReal, FiniteNumbersOnly) {
  double v = 0;
  EXPECT_TRUE(qctool::parse_real("0.25", &v));
  EXPECT_EQ(v, 0.25);
  EXPECT_TRUE(qctool::parse_real("1e-3", &v));
  EXPECT_EQ(v, 1e-3);
  for (const char* text : {"", "abc", "1.5x", " 1", "inf", "nan", "1e999"}) {
    EXPECT_FALSE(qctool::parse_real(text, &v)) << text;
  }
}

TEST(ToolParseList, KeepsEmptyItemsAndNormalisesNames) {
  EXPECT_EQ(qctool::split_list("a,b,,c"), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(qctool::split_list(""), (std::vector<std::string>{""}));
  EXPECT_EQ(qctool::normalize_name("Global-Linear"), "global_linear");
}

TEST(ToolCli, LongNamesGetBothSpellings) {
  EXPECT_EQ(qctool::with_both_spellings("-w,--warmup_iters"),
            "-w,--warmup_iters,--warmup-iters");
  EXPECT_EQ(qctool::with_both_spellings("--topk-ratio"), "--topk-ratio,--topk_ratio");
  EXPECT_EQ(qctool::with_both_spellings("-n,--nranks"), "-n,--nranks");
  EXPECT_EQ(qctool::first_name("-e,--maxbytes"), "-e");
}

// The option types through CLI11: the values land, bad ones are refused
// with the message the tools print.
TEST(ToolCli, OptionTypesParseAndRefuse) {
  auto parse = [](std::vector<std::string> args, uint64_t* bytes, int* n, double* r) {
    CLI::App app{"test", "qc-test"};
    qctool::init_app(app, "");
    qctool::add_size(app, "-e,--maxbytes", bytes, "");
    qctool::add_integer(app, "-n", n, 1, 8, "");
    qctool::add_real(app, "--ratio", r, [](double x) { return x > 0 && x <= 1; }, "0 < R <= 1",
                     "");
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    try {
      app.parse(args);
    } catch (const CLI::ParseError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  uint64_t bytes = 0;
  int n = 0;
  double r = 0;
  EXPECT_EQ(parse({"-e", "64K", "-n", "3", "--ratio", "0.5"}, &bytes, &n, &r), "");
  EXPECT_EQ(bytes, 64u << 10);
  EXPECT_EQ(n, 3);
  EXPECT_EQ(r, 0.5);
  EXPECT_EQ(parse({"--maxbytes=1M", "-e", "2M"}, &bytes, &n, &r), "");  // the last one counts
  EXPECT_EQ(bytes, 2u << 20);
  EXPECT_EQ(parse({"-e", "12Q"}, &bytes, &n, &r).rfind("bad size '12Q' for -e (", 0), 0u);
  EXPECT_EQ(parse({"-n", "9"}, &bytes, &n, &r), "bad value '9' for -n (an integer in 1..8)");
  EXPECT_EQ(parse({"--ratio", "2"}, &bytes, &n, &r), "bad value '2' for --ratio (0 < R <= 1)");
}

TEST(ToolJson, NonFiniteNumbersAreNull) {
  qctool::Json j;
  j["nan"] = std::numeric_limits<double>::quiet_NaN();
  j["inf"] = std::numeric_limits<double>::infinity();
  j["x"] = 1.5;
  EXPECT_EQ(qctool::json_text(j), "{\n  \"nan\": null,\n  \"inf\": null,\n  \"x\": 1.5\n}\n");
}

TEST(ToolJson, ArraysHaveOneElementALineAndKeysKeepTheirOrder) {
  qctool::Json rows = qctool::Json::array();
  for (int i = 0; i < 2; ++i) {
    qctool::Json row;
    row["size"] = 8 << i;
    row["codec"] = "none";
    rows.push_back(row);
  }
  EXPECT_EQ(qctool::json_text(rows),
            "[\n  {\"size\":8,\"codec\":\"none\"},\n  {\"size\":16,\"codec\":\"none\"}\n]\n");
  EXPECT_EQ(qctool::json_text(qctool::Json::array()), "[]\n");
}

TEST(ToolJson, BytesThatAreNotUtf8DoNotFailTheWrite) {
  qctool::Json j;
  j["command"] = std::string("qc-perf -J \xff.json");
  EXPECT_EQ(qctool::json_text(j), "{\n  \"command\": \"qc-perf -J \xef\xbf\xbd.json\"\n}\n");
}

TEST(ToolText, HumanBytes) {
  EXPECT_EQ(qctool::human_bytes(7), "7 B");
  EXPECT_EQ(qctool::human_bytes(1536 << 10), "1536 KiB");
  EXPECT_EQ(qctool::human_bytes(32u << 20), "32 MiB");
  EXPECT_EQ(qctool::human_bytes(1ull << 40), "1 TiB");
}

}  // namespace

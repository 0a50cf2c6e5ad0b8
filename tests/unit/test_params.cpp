// The QC_* parameter table (src/core/params.h): every variable's valid and
// invalid forms through a fake environment, the policy and timeout overrides,
// and docs/parameters.md against the table. Links the internal objects.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/enum_names.h"
#include "core/params.h"
#include "core/policy.h"

namespace qc {
namespace {

// A fake environment: read_params sees only these variables.
struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

// Field by field: qc_policy_t has padding, which memcmp would compare.
::testing::AssertionResult same_policy(const qc_policy_t& a, const qc_policy_t& b) {
  if (a.struct_size == b.struct_size && a.codec == b.codec && a.bits == b.bits &&
      a.bucket_size == b.bucket_size && a.rounding == b.rounding && a.algorithm == b.algorithm &&
      a.error_feedback == b.error_feedback && a.group_size == b.group_size &&
      a.topk_ratio == b.topk_ratio && a.scale_update_period == b.scale_update_period &&
      a.seed == b.seed && a.min_compress_bytes == b.min_compress_bytes)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << describe_policy(a) << " (min_compress_bytes "
                                       << a.min_compress_bytes << ") vs " << describe_policy(b)
                                       << " (min_compress_bytes " << b.min_compress_bytes << ")";
}

Status read_one(const std::string& name, const std::string& value, EnvParams* out) {
  FakeEnv env;
  env.vars[name] = value;
  return read_params(env.lookup(), out);
}

struct Case {
  const char* name;
  std::vector<const char*> good;
  std::vector<const char*> bad;
};

// Every variable in the table must have a row here (checked below), so a new
// variable cannot land without tests of its parser.
const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      {"QC_DEBUG", {"none", "warn", "info", "debug", "0", "1", "2", "3"},
       {"verbose", "WARN", "4", "-1", " warn", "warn "}},
      {"QC_DEBUG_FILE", {"/tmp/qc.log", "qc-%p.log", "relative"}, {}},
      {"QC_LOG_LEVEL", {"none", "warn", "info", "debug", "2"}, {"loud", "5"}},
      {"QC_CODEC",
       {"none", "fp16", "bf16", "minmax", "qsgd", "global_linear", "global_exp", "onebit", "topk"},
       {"int8", "MINMAX", "3", "minmax "}},
      {"QC_BITS", {"1", "2", "4", "8"}, {"0", "9", "-1", "4.0", "four", "+4", " 4", "4 ", "0x4"}},
      {"QC_BUCKET", {"1", "128", "2147483647"}, {"0", "-5", "2147483648", "12k", "1e3"}},
      {"QC_ALGO", {"auto", "ring", "rd", "recursive_doubling", "sra", "tree", "native"},
       {"RING", "halving", "1"}},
      {"QC_EF", {"0", "1"}, {"2", "yes", "true", "-1", "01x"}},
      {"QC_MIN_COMPRESS", {"0", "16384", "1K", "64k", "2M", "1G", "1g"},
       {"-1", "1T", "1KB", "K", "1.5K", " 1", "99999999999999999999", "17179869184G"}},
      {"QC_TIMEOUT", {"300", "0.5", ".25", "1e3", "3600", "1e300"},
       {"0", "-1", "0.0", "abc", "nan", "inf", "10s", "1e999", "-0"}},
      {"QC_CPU_ISA", {"auto", "scalar", "avx2", "avx512"}, {"sse", "AVX2", "avx-512"}},
      {"QC_DEVICE_CODEC", {"0", "1"}, {"2", "off", "true", "-1", "1 "}},
      {"QC_PROGRESS_THREAD", {"0", "1"}, {"2", "no", "yes", "-1", " 0"}},
      {"QC_PIPELINE_CHUNK", {"0", "4096", "256K", "1M"}, {"-1", "1.5", "1T", "abc"}},
      {"QC_SPARSE_SCHEDULE", {"auto", "allgather", "sra", "densify"}, {"ring", "0", "SRA", "dense"}},
      {"QC_EMULATION_KEEP", {"0", "1024", "64M", "2G"}, {"-1", "0.5", "1T", "all"}},
  };
  return kCases;
}

TEST(Params, EveryVariableHasTestCases) {
  size_t count = 0;
  const ParamInfo* table = param_table(&count);
  std::set<std::string> tested;
  for (const Case& c : cases()) tested.insert(c.name);
  for (size_t i = 0; i < count; ++i) EXPECT_EQ(tested.count(table[i].name), 1u) << table[i].name;
  EXPECT_EQ(tested.size(), count);
}

TEST(Params, ValidValuesParse) {
  for (const Case& c : cases()) {
    for (const char* v : c.good) {
      EnvParams p;
      Status s = read_one(c.name, v, &p);
      EXPECT_TRUE(s.is_ok()) << c.name << "=" << v << ": " << s.message();
    }
  }
}

TEST(Params, InvalidValuesNameTheVariableValueAndAllowed) {
  size_t count = 0;
  const ParamInfo* table = param_table(&count);
  for (const Case& c : cases()) {
    const ParamInfo* info = nullptr;
    for (size_t i = 0; i < count; ++i)
      if (std::strcmp(table[i].name, c.name) == 0) info = &table[i];
    ASSERT_NE(info, nullptr) << c.name;
    for (const char* v : c.bad) {
      EnvParams p;
      Status s = read_one(c.name, v, &p);
      EXPECT_EQ(s.code(), QC_ERROR_INVALID_ARGUMENT) << c.name << "=" << v;
      const std::string expected_head =
          std::string("environment variable ") + c.name + "=\"" + v + "\": expected ";
      EXPECT_EQ(s.message().rfind(expected_head, 0), 0u) << s.message();
      EXPECT_NE(s.message().find(info->allowed), std::string::npos) << s.message();
    }
  }
}

TEST(Params, MessageFormat) {
  EnvParams p;
  Status s = read_one("QC_BITS", "9", &p);
  EXPECT_EQ(s.message(), "environment variable QC_BITS=\"9\": expected an integer 1..8");
  s = read_one("QC_CODEC", "int8", &p);
  EXPECT_EQ(s.message(),
            "environment variable QC_CODEC=\"int8\": expected one of none, fp16, bf16, minmax, "
            "qsgd, global_linear, global_exp, onebit, topk, mxfp8, mxfp8_e5m2, mxfp6, "
            "mxfp6_e3m2, mxfp4, mxint8, nvfp4");
}

TEST(Params, EveryBadValueIsReportedAndGoodOnesKept) {
  FakeEnv env;
  env.vars = {{"QC_BITS", "9"}, {"QC_TIMEOUT", "-3"}, {"QC_BUCKET", "64"}};
  EnvParams p;
  Status s = read_params(env.lookup(), &p);
  EXPECT_EQ(s.code(), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("QC_BITS=\"9\""), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("QC_TIMEOUT=\"-3\""), std::string::npos) << s.message();
  EXPECT_FALSE(p.bits.set);
  EXPECT_EQ(p.bits.raw, "9");
  EXPECT_TRUE(p.bucket.set);
  EXPECT_EQ(p.bucket.value, 64);
}

TEST(Params, UnsetAndEmptyKeepDefaults) {
  FakeEnv env;
  env.vars = {{"QC_CODEC", ""}, {"QC_BITS", ""}};
  EnvParams p;
  ASSERT_TRUE(read_params(env.lookup(), &p).is_ok());
  EXPECT_FALSE(p.codec.set);
  EXPECT_FALSE(p.bits.set);
  qc_policy_t policy = default_policy();
  apply_env_to_policy(p, &policy);
  EXPECT_TRUE(same_policy(policy, default_policy()));
  EXPECT_EQ(env_timeout(p, 42.0), 42.0);
  EXPECT_TRUE(env_device_codec(p));
  EXPECT_TRUE(env_progress_thread(p));
  EXPECT_EQ(env_pipeline_chunk(p), kDefaultPipelineChunkBytes);
  EXPECT_EQ(env_emulation_keep(p), kDefaultEmulationKeepBytes);
  EXPECT_EQ(env_sparse_schedule(p), static_cast<int>(SparseSchedule::kAuto));
  EXPECT_EQ(env_log_level(p), LogLevel::kWarn);
}

TEST(Params, ParsedValues) {
  FakeEnv env;
  env.vars = {{"QC_DEBUG", "debug"},   {"QC_DEBUG_FILE", "/tmp/qc-%p.log"},
              {"QC_CODEC", "qsgd"},    {"QC_BITS", "3"},
              {"QC_BUCKET", "512"},    {"QC_ALGO", "rd"},
              {"QC_EF", "1"},          {"QC_MIN_COMPRESS", "64K"},
              {"QC_TIMEOUT", "2.5"},   {"QC_CPU_ISA", "scalar"},
              {"QC_DEVICE_CODEC", "0"}, {"QC_PROGRESS_THREAD", "0"},
              {"QC_PIPELINE_CHUNK", "1M"}, {"QC_SPARSE_SCHEDULE", "densify"},
              {"QC_EMULATION_KEEP", "0"}};
  EnvParams p;
  ASSERT_TRUE(read_params(env.lookup(), &p).is_ok());
  EXPECT_EQ(p.debug.value, LogLevel::kDebug);
  EXPECT_EQ(p.debug_file.value, "/tmp/qc-%p.log");
  EXPECT_EQ(p.codec.value, QC_CODEC_QSGD);
  EXPECT_EQ(p.bits.value, 3);
  EXPECT_EQ(p.bucket.value, 512);
  EXPECT_EQ(p.algo.value, QC_ALGO_RECURSIVE_DOUBLING);
  EXPECT_EQ(p.ef.value, 1);
  EXPECT_EQ(p.min_compress.value, 65536u);
  EXPECT_EQ(p.timeout.value, 2.5);
  EXPECT_EQ(p.cpu_isa.value, 0);
  EXPECT_EQ(p.device_codec.value, 0);
  EXPECT_FALSE(env_device_codec(p));
  EXPECT_FALSE(env_progress_thread(p));
  EXPECT_EQ(env_pipeline_chunk(p), 1024u * 1024u);
  EXPECT_EQ(env_sparse_schedule(p), static_cast<int>(SparseSchedule::kDensify));
  EXPECT_TRUE(p.emulation_keep.set);
  EXPECT_EQ(env_emulation_keep(p), 0u);
  EXPECT_EQ(p.codec.raw, "qsgd");
}

TEST(Params, MinCompressSuffixesArePowersOf1024) {
  const std::pair<const char*, size_t> kSizes[] = {
      {"0", 0},           {"1000", 1000},           {"1K", 1024},          {"3k", 3 * 1024},
      {"2M", 2u << 20},   {"5m", 5u << 20},         {"1G", size_t(1) << 30}, {"4g", size_t(4) << 30}};
  for (const auto& [text, bytes] : kSizes) {
    EnvParams p;
    ASSERT_TRUE(read_one("QC_MIN_COMPRESS", text, &p).is_ok()) << text;
    EXPECT_EQ(p.min_compress.value, bytes) << text;
  }
}

TEST(Params, TimeoutMustBePositiveNumber) {
  for (const char* bad : {"0", "-0", "-1", "-0.5", "", "x", "1e-400"}) {
    EnvParams p;
    Status s = read_one("QC_TIMEOUT", bad, &p);
    if (*bad == '\0') {
      EXPECT_TRUE(s.is_ok());  // empty = unset
      continue;
    }
    EXPECT_EQ(s.code(), QC_ERROR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(s.message().find("QC_TIMEOUT"), std::string::npos);
  }
  EnvParams p;
  ASSERT_TRUE(read_one("QC_TIMEOUT", "7", &p).is_ok());
  EXPECT_EQ(env_timeout(p, 300.0), 7.0);
}

TEST(Params, ApplyOverridesExactlyTheSetFields) {
  struct Override {
    const char* name;
    const char* value;
    void (*expect)(qc_policy_t*);  // applies the expected change to a default policy
  };
  const Override kOverrides[] = {
      {"QC_CODEC", "topk", [](qc_policy_t* q) { q->codec = QC_CODEC_TOPK; }},
      {"QC_BITS", "2", [](qc_policy_t* q) { q->bits = 2; }},
      {"QC_BUCKET", "7", [](qc_policy_t* q) { q->bucket_size = 7; }},
      {"QC_ALGO", "tree", [](qc_policy_t* q) { q->algorithm = QC_ALGO_TREE; }},
      {"QC_EF", "1", [](qc_policy_t* q) { q->error_feedback = 1; }},
      {"QC_MIN_COMPRESS", "0", [](qc_policy_t* q) { q->min_compress_bytes = 0; }},
      // Not policy fields: the policy must not move.
      {"QC_TIMEOUT", "5", [](qc_policy_t*) {}},
      {"QC_DEBUG", "info", [](qc_policy_t*) {}},
      {"QC_CPU_ISA", "scalar", [](qc_policy_t*) {}},
      {"QC_DEVICE_CODEC", "0", [](qc_policy_t*) {}},
      {"QC_PROGRESS_THREAD", "0", [](qc_policy_t*) {}},
      {"QC_PIPELINE_CHUNK", "0", [](qc_policy_t*) {}},
      {"QC_SPARSE_SCHEDULE", "sra", [](qc_policy_t*) {}},
  };
  // A non-default starting point, so "unchanged" is not the same as "reset".
  qc_policy_t start = default_policy();
  start.seed = 99;
  start.topk_ratio = 0.5f;
  start.group_size = 4;
  for (const Override& o : kOverrides) {
    EnvParams p;
    ASSERT_TRUE(read_one(o.name, o.value, &p).is_ok()) << o.name;
    qc_policy_t got = start;
    apply_env_to_policy(p, &got);
    qc_policy_t want = start;
    o.expect(&want);
    EXPECT_TRUE(same_policy(got, want)) << o.name << "=" << o.value;
  }
  // All at once, and the result still passes validation.
  FakeEnv env;
  for (const Override& o : kOverrides) env.vars[o.name] = o.value;
  EnvParams p;
  ASSERT_TRUE(read_params(env.lookup(), &p).is_ok());
  qc_policy_t got = start;
  apply_env_to_policy(p, &got);
  qc_policy_t want = start;
  for (const Override& o : kOverrides) o.expect(&want);
  EXPECT_TRUE(same_policy(got, want));
  EXPECT_TRUE(validate_policy(got, "env").is_ok());
}

TEST(Params, DebugWinsOverDeprecatedLogLevel) {
  FakeEnv env;
  env.vars = {{"QC_LOG_LEVEL", "none"}};
  EnvParams p;
  ASSERT_TRUE(read_params(env.lookup(), &p).is_ok());
  EXPECT_EQ(env_log_level(p), LogLevel::kNone);
  env.vars["QC_DEBUG"] = "debug";
  ASSERT_TRUE(read_params(env.lookup(), &p).is_ok());
  EXPECT_EQ(env_log_level(p), LogLevel::kDebug);
}

TEST(Params, DefaultsMatchTheStructInitialisers) {
  const qc_policy_t d = default_policy();
  const qc_comm_config_t c = default_comm_config();
  const std::map<std::string, std::string> want = {
      {"QC_CODEC", codec_name(d.codec)},
      {"QC_BITS", std::to_string(d.bits)},
      {"QC_BUCKET", std::to_string(d.bucket_size)},
      {"QC_ALGO", algorithm_name(d.algorithm)},
      {"QC_EF", std::to_string(d.error_feedback)},
      {"QC_MIN_COMPRESS", std::to_string(d.min_compress_bytes)},
      {"QC_TIMEOUT", std::to_string(static_cast<int>(c.timeout_seconds))},
      {"QC_DEBUG", "warn"},
      {"QC_LOG_LEVEL", "warn"}};
  size_t count = 0;
  const ParamInfo* table = param_table(&count);
  for (size_t i = 0; i < count; ++i) {
    auto it = want.find(table[i].name);
    if (it != want.end()) {
      EXPECT_EQ(it->second, table[i].default_text) << table[i].name;
    }
    // Every default (but an empty string) must itself be a valid value.
    if (*table[i].default_text == '\0') continue;
    EnvParams p;
    EXPECT_TRUE(read_one(table[i].name, table[i].default_text, &p).is_ok()) << table[i].name;
  }
}

TEST(Params, EnumAllowedListsMatchTheParsers) {
  // Each word an enum documents must parse, and every codec/algorithm the
  // library has must be documented.
  size_t count = 0;
  const ParamInfo* table = param_table(&count);
  for (size_t i = 0; i < count; ++i) {
    if (std::strcmp(table[i].type, "enum") != 0) continue;
    std::string allowed = table[i].allowed;
    allowed = allowed.substr(0, allowed.find(" ("));  // drop "(or 0..3)"
    std::stringstream words(allowed);
    std::string w;
    while (std::getline(words, w, ',')) {
      w.erase(0, w.find_first_not_of(' '));
      EnvParams p;
      EXPECT_TRUE(read_one(table[i].name, w, &p).is_ok()) << table[i].name << " " << w;
    }
  }
  for (int c = QC_CODEC_NONE; c <= QC_CODEC_NVFP4; ++c) {
    EnvParams p;
    EXPECT_TRUE(read_one("QC_CODEC", codec_name(static_cast<qc_codec_t>(c)), &p).is_ok());
    EXPECT_EQ(p.codec.value, c);
  }
  for (int a = QC_ALGO_AUTO; a <= QC_ALGO_NATIVE; ++a) {
    EnvParams p;
    EXPECT_TRUE(read_one("QC_ALGO", algorithm_name(static_cast<qc_algorithm_t>(a)), &p).is_ok());
    EXPECT_EQ(p.algo.value, a);
  }
}

TEST(Params, UnknownNameIsAnError) {
  EnvParams p;
  Status s = parse_env_value("QC_BIT", "4", &p);
  EXPECT_EQ(s.code(), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("QC_BIT"), std::string::npos);
}

TEST(Params, TableTextFitsAMarkdownTable) {
  size_t count = 0;
  const ParamInfo* table = param_table(&count);
  for (size_t i = 0; i < count; ++i) {
    for (const char* text : {table[i].name, table[i].type, table[i].default_text, table[i].allowed,
                             table[i].doc}) {
      EXPECT_EQ(std::strchr(text, '|'), nullptr) << table[i].name << ": " << text;
      EXPECT_EQ(std::strchr(text, '\n'), nullptr) << table[i].name << ": " << text;
    }
  }
}

TEST(Params, DocsPageIsUpToDate) {
  const std::string path = std::string(QC_SOURCE_DIR) + "/docs/parameters.md";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream page;
  page << in.rdbuf();
  EXPECT_EQ(page.str(), params_markdown())
      << path << " is stale: regenerate it with `qc-info --markdown > docs/parameters.md`";
}


// ---- through communicator creation (the public C API) ------------------------
// The environment is process-wide: each test of this fixture starts with every
// QC_* variable of the table unset and puts the process's own values back
// when it ends. gtest runs the tests of this binary one after another, and
// ctest runs each test as its own process (gtest_discover_tests), so no other
// test sees these values.
class EnvAtCreation : public ::testing::Test {
 protected:
  void SetUp() override {
    size_t count = 0;
    const ParamInfo* table = param_table(&count);
    for (size_t i = 0; i < count; ++i) {
      const char* v = std::getenv(table[i].name);
      saved_.push_back({table[i].name, v != nullptr, v != nullptr ? v : ""});
      ::unsetenv(table[i].name);
    }
  }
  void TearDown() override {
    for (const Saved& s : saved_) {
      if (s.was_set) {
        ::setenv(s.name.c_str(), s.value.c_str(), 1);
      } else {
        ::unsetenv(s.name.c_str());
      }
    }
  }
  static void set(const char* name, const std::string& value) {
    ASSERT_EQ(::setenv(name, value.c_str(), 1), 0) << name;
  }

  // Creates a local group of n ranks both ways (with and without a config);
  // on success the communicators go to *out (the first way's) and the
  // second way's are destroyed at once.
  static qc_status_t create_local(int n, std::vector<qc_comm_t>* out, std::string* error,
                                  double timeout = 60.0) {
    std::vector<qc_comm_t> a(static_cast<size_t>(n), nullptr), b(a);
    const qc_status_t sa = qc_comm_create_local(n, a.data());
    const std::string ea = sa == QC_SUCCESS ? "" : qc_last_error();
    if (sa != QC_SUCCESS) {
      for (qc_comm_t c : a) EXPECT_EQ(c, nullptr) << "a failed creation writes no communicator";
    }
    qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
    cfg.timeout_seconds = timeout;
    const qc_status_t sb = qc_comm_create_local_with_config(n, &cfg, b.data());
    const std::string eb = sb == QC_SUCCESS ? "" : qc_last_error();
    EXPECT_EQ(sa, sb) << "qc_comm_create_local and qc_comm_create_local_with_config disagree: "
                      << ea << " / " << eb;
    if (sa != QC_SUCCESS) {
      EXPECT_NE(ea.find("qc_comm_create_local: "), std::string::npos) << ea;
      EXPECT_NE(eb.find("qc_comm_create_local_with_config: "), std::string::npos) << eb;
    }
    for (qc_comm_t c : b) qc_comm_destroy(c);
    if (error != nullptr) *error = ea;
    if (out != nullptr) {
      *out = a;
    } else {
      for (qc_comm_t c : a) qc_comm_destroy(c);
    }
    return sa;
  }

  static qc_policy_t star(qc_comm_t c) {
    qc_policy_t p = QC_POLICY_INIT;
    EXPECT_EQ(qc_comm_get_layer_policy(c, "*", &p), QC_SUCCESS) << qc_last_error();
    return p;
  }

 private:
  struct Saved {
    std::string name;
    bool was_set;
    std::string value;
  };
  std::vector<Saved> saved_;
};

TEST_F(EnvAtCreation, EveryBadValueFailsCreationNamingTheVariable) {
  const bool have_mpi = std::string(build_features()).find("mpi") != std::string::npos;
  size_t tried = 0;
  for (const Case& c : cases()) {
    for (const char* v : c.bad) {
      set(c.name, v);
      std::string error;
      EXPECT_EQ(create_local(3, nullptr, &error), QC_ERROR_INVALID_ARGUMENT) << c.name << "=" << v;
      EXPECT_NE(error.find(std::string("environment variable ") + c.name + "=\"" + v + "\""),
                std::string::npos)
          << error;
      // qc_comm_create reads the environment before it touches MPI.
      qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
      cfg.transport = QC_TRANSPORT_MPI;
      qc_comm_t comm = nullptr;
      const qc_status_t s = qc_comm_create(&cfg, &comm);
      if (have_mpi) {
        EXPECT_EQ(s, QC_ERROR_INVALID_ARGUMENT) << c.name << "=" << v;
        const std::string msg = qc_last_error();
        EXPECT_NE(msg.find(std::string("qc_comm_create: environment variable ") + c.name),
                  std::string::npos)
            << msg;
      } else {
        EXPECT_EQ(s, QC_ERROR_UNSUPPORTED);
      }
      EXPECT_EQ(comm, nullptr);
      ::unsetenv(c.name);
      ++tried;
    }
  }
  EXPECT_GT(tried, 50u);
}

TEST_F(EnvAtCreation, EveryGoodValueCreates) {
  for (const Case& c : cases()) {
    std::vector<std::string> good(c.good.begin(), c.good.end());
    // Keep log files out of the working directory.
    if (std::string(c.name) == "QC_DEBUG_FILE") good = {::testing::TempDir() + "qc-env-%p.log"};
    for (const std::string& v : good) {
      set(c.name, v);
      std::string error;
      EXPECT_EQ(create_local(2, nullptr, &error), QC_SUCCESS) << c.name << "=" << v << ": "
                                                              << error;
      ::unsetenv(c.name);
    }
  }
}

TEST_F(EnvAtCreation, PolicyValuesChangeTheStarPolicyOnEveryRank) {
  const qc_policy_t init = QC_POLICY_INIT;
  struct Effect {
    const char* name;
    const char* value;
    std::function<void(qc_policy_t*)> apply;  // what the value does to QC_POLICY_INIT
  };
  const std::vector<Effect> effects = {
      {"QC_CODEC", "minmax", [](qc_policy_t* p) { p->codec = QC_CODEC_MINMAX; }},
      {"QC_BITS", "2", [](qc_policy_t* p) { p->bits = 2; }},
      {"QC_BUCKET", "64", [](qc_policy_t* p) { p->bucket_size = 64; }},
      {"QC_ALGO", "rd", [](qc_policy_t* p) { p->algorithm = QC_ALGO_RECURSIVE_DOUBLING; }},
      {"QC_EF", "1", [](qc_policy_t* p) { p->error_feedback = 1; }},
      {"QC_MIN_COMPRESS", "1K", [](qc_policy_t* p) { p->min_compress_bytes = 1024; }},
  };
  for (const Effect& e : effects) {
    set(e.name, e.value);
    std::vector<qc_comm_t> comms;
    std::string error;
    ASSERT_EQ(create_local(3, &comms, &error), QC_SUCCESS) << e.name << ": " << error;
    qc_policy_t want = init;
    e.apply(&want);
    for (qc_comm_t c : comms) {
      EXPECT_TRUE(same_policy(star(c), want)) << e.name << "=" << e.value;
      // A layer without a policy of its own resolves to "*" as well.
      EXPECT_TRUE(same_policy([&] {
        qc_policy_t p = QC_POLICY_INIT;
        EXPECT_EQ(qc_comm_get_layer_policy(c, "fc1.weight", &p), QC_SUCCESS);
        return p;
      }(), want)) << e.name;
    }
    for (qc_comm_t c : comms) qc_comm_destroy(c);
    ::unsetenv(e.name);
  }
  // All at once, and read at creation only: a group made before the change
  // keeps its policy.
  std::vector<qc_comm_t> before;
  ASSERT_EQ(create_local(1, &before, nullptr), QC_SUCCESS);
  for (const Effect& e : effects) set(e.name, e.value);
  std::vector<qc_comm_t> after;
  std::string error;
  ASSERT_EQ(create_local(1, &after, &error), QC_SUCCESS) << error;
  qc_policy_t all = init;
  for (const Effect& e : effects) e.apply(&all);
  EXPECT_TRUE(same_policy(star(after[0]), all));
  EXPECT_TRUE(same_policy(star(before[0]), init));
  // The environment never overrides what the program sets.
  qc_policy_t mine = QC_POLICY_INIT;
  mine.bits = 7;
  ASSERT_EQ(qc_comm_set_layer_policy(after[0], "*", &mine), QC_SUCCESS);
  EXPECT_EQ(star(after[0]).bits, 7);
  qc_comm_destroy(before[0]);
  qc_comm_destroy(after[0]);
}

TEST_F(EnvAtCreation, EmptyValueIsUnset) {
  set("QC_BITS", "");
  set("QC_CODEC", "");
  std::vector<qc_comm_t> comms;
  std::string error;
  ASSERT_EQ(create_local(1, &comms, &error), QC_SUCCESS) << error;
  const qc_policy_t init = QC_POLICY_INIT;
  EXPECT_TRUE(same_policy(star(comms[0]), init));
  qc_comm_destroy(comms[0]);
}

TEST_F(EnvAtCreation, ValidValuesThatMakeAnInvalidPolicyFail) {
  set("QC_CODEC", "qsgd");
  set("QC_BITS", "1");
  std::string error;
  EXPECT_EQ(create_local(2, nullptr, &error), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(error.find("QC_* environment variables make an invalid default policy"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("bits"), std::string::npos) << error;
}

// Issue 28, item 9: the global codecs cannot use 1 bit either; the
// environment gets the same policy check as qc_comm_set_layer_policy.
TEST_F(EnvAtCreation, GlobalCodecWithOneBitFails) {
  for (const char* codec : {"global_linear", "global_exp"}) {
    set("QC_CODEC", codec);
    set("QC_BITS", "1");
    std::string error;
    EXPECT_EQ(create_local(2, nullptr, &error), QC_ERROR_INVALID_ARGUMENT) << codec;
    EXPECT_NE(error.find(std::string("codec ") + codec + " needs 2..8"), std::string::npos)
        << error;
  }
}

// Issue 28, item 5: a huge QC_TIMEOUT is a wait for ever in practice. It
// used to overflow the deadline, so that every call timed out at once.
TEST_F(EnvAtCreation, HugeTimeoutDoesNotTimeOutAtOnce) {
  for (const char* huge : {"1e12", "1e300", "9.3e9"}) {
    set("QC_TIMEOUT", huge);
    std::vector<qc_comm_t> comms;
    std::string error;
    ASSERT_EQ(create_local(2, &comms, &error), QC_SUCCESS) << error;
    float x[2][4] = {{1, 2, 3, 4}, {1, 2, 3, 4}}, y[2][4];
    qc_status_t status[2] = {QC_ERROR_INTERNAL, QC_ERROR_INTERNAL};
    std::string errors[2];
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        status[r] = qc_allreduce(comms[r], x[r], y[r], 4, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr,
                                 nullptr, nullptr);
        if (status[r] != QC_SUCCESS) errors[r] = qc_last_error();
      });
    }
    for (std::thread& t : ranks) t.join();
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(status[r], QC_SUCCESS) << "QC_TIMEOUT=" << huge << ", rank " << r << ": "
                                       << errors[r];
    }
    for (qc_comm_t c : comms) qc_comm_destroy(c);
  }
}

TEST_F(EnvAtCreation, SeveralBadValuesAreAllNamed) {
  set("QC_BITS", "9");
  set("QC_EF", "yes");
  set("QC_CODEC", "minmax");  // good: not named
  std::string error;
  EXPECT_EQ(create_local(2, nullptr, &error), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(error.find("QC_BITS=\"9\""), std::string::npos) << error;
  EXPECT_NE(error.find("QC_EF=\"yes\""), std::string::npos) << error;
  EXPECT_EQ(error.find("QC_CODEC"), std::string::npos) << error;
}

TEST_F(EnvAtCreation, TimeoutReplacesTheConfiguredOne) {
  set("QC_TIMEOUT", "0.3");
  std::vector<qc_comm_t> comms;
  std::string error;
  ASSERT_EQ(create_local(2, &comms, &error, /*timeout=*/60.0), QC_SUCCESS) << error;
  // Rank 0 calls alone: its wait ends after QC_TIMEOUT, not the configured 60 s.
  float x[4] = {1, 2, 3, 4}, y[4];
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(qc_allreduce(comms[0], x, y, 4, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr, nullptr),
            QC_ERROR_TIMEOUT)
      << qc_last_error();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.25);
  EXPECT_LT(waited, 10.0);
  for (qc_comm_t c : comms) qc_comm_destroy(c);
}

}  // namespace
}  // namespace qc

// qc-info: what this libqc is and what the environment makes it do.
//   qc-info             human-readable report; exit status 1 when a QC_*
//                       variable is invalid (so scripts can check a job's
//                       environment before launching it)
//   qc-info --markdown  docs/parameters.md
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <set>
#include <string>

#include "core/params.h"
#include "cpu/codec_kernels.h"
#include "qc.h"
#include "qc_tool_cli.h"

extern char** environ;

namespace {

const char* best_isa() {
  for (qc::cpu::Isa isa : {qc::cpu::Isa::kAvx512, qc::cpu::Isa::kAvx2}) {
    if (qc::cpu::kernels_for(isa) != nullptr) return qc::cpu::isa_name(isa);
  }
  return qc::cpu::isa_name(qc::cpu::Isa::kScalar);
}

// A misspelt variable (QC_BIT=2) is silently ignored by the library; here
// is the one place a user can see that it was.
int report_unknown_variables(const qc::ParamInfo* table, size_t count) {
  std::set<std::string> known;
  for (size_t i = 0; i < count; ++i) known.insert(table[i].name);
  int unknown = 0;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (std::strncmp(*e, "QC_", 3) != 0 || eq == nullptr) continue;
    const std::string name(*e, static_cast<size_t>(eq - *e));
    if (known.count(name) != 0) continue;
    if (unknown++ == 0) std::printf("\nset but not read by qc (misspelt?):\n");
    std::printf("  %s\n", name.c_str());
  }
  return unknown;
}

int print_report() {
  std::printf("qc %s\n", qc_version_string());
  std::printf("build features: %s\n", qc::build_features());
  std::printf("cpu isa: detected %s, selected %s\n", best_isa(), qc::cpu::kernels().name);

  size_t count = 0;
  const qc::ParamInfo* table = qc::param_table(&count);
  size_t width = 0;
  for (size_t i = 0; i < count; ++i) width = std::max(width, std::strlen(table[i].name));

  std::printf("\nenvironment variables (docs/parameters.md):\n");
  int invalid = 0;
  for (size_t i = 0; i < count; ++i) {
    const qc::ParamInfo& p = table[i];
    const char* text = std::getenv(p.name);
    if (text == nullptr || *text == '\0') {
      std::printf("  %-*s = %-16s (default)\n", static_cast<int>(width), p.name,
                  *p.default_text ? p.default_text : "(unset)");
      continue;
    }
    qc::EnvParams parsed;
    const qc::Status s = qc::parse_env_value(p.name, text, &parsed);
    if (s) {
      std::printf("  %-*s = %-16s (env)\n", static_cast<int>(width), p.name, text);
    } else {
      ++invalid;
      std::printf("  %-*s = %-16s (env, INVALID: %s)\n", static_cast<int>(width), p.name, text,
                  s.message().c_str());
    }
  }
  report_unknown_variables(table, count);
  if (invalid != 0) {
    std::printf("\n%d invalid value(s): qc_comm_create would fail with QC_ERROR_INVALID_ARGUMENT\n",
                invalid);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"What this libqc is: version, build features, CPU kernels and every QC_*\n"
               "environment variable with its value and source.",
               "qc-info"};
  qctool::init_app(app, "Exit status: 0, 1 when a QC_* variable is invalid (the report), 2 bad "
                        "usage.");
  bool markdown = false;
  app.add_flag("--markdown", markdown,
               "print the environment-variable reference instead\n(docs/parameters.md)");
  qctool::parse_or_exit(app, argc, argv);
  if (markdown) {
    std::fputs(qc::params_markdown().c_str(), stdout);
    return 0;
  }
  return print_report();
}

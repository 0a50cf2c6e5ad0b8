// The command line of every qc tool, on CLI11: the same --help and --version,
// the same usage errors (a message naming the option on stderr, exit status
// 2), and the option types the tools share (sizes, ranged integers, reals).
//
//   CLI::App app{"what the tool does", "qc-foo"};
//   qctool::init_app(app, "Exit status: ...");
//   qctool::add_size(app, "-e,--maxbytes", &opt.max_bytes, "largest size");
//   app.add_option("-c,--codec", opt.codecs, "codecs, comma separated");
//   qctool::parse_or_exit(app, argc, argv);
//   if (...) qctool::usage_error(app, "-e must not be smaller than -b");
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "qc_tool_names.h"
#include "qc_tool_parse.h"

namespace qctool {

// Sets up `app`, named after the tool: -h/--help, --version (prints
// "<tool> <qc_version_string()>" and exits 0), an option given twice takes
// its last value, and `footer` (exit statuses, examples) after the options.
void init_app(CLI::App& app, const std::string& footer);

// Parses the command line; on --help or --version prints to stdout and
// exits 0, on a bad command line exits as usage_error does.
void parse_or_exit(CLI::App& app, int argc, char** argv);

// "<tool>: <message>" and "(try '<tool> --help')" on stderr, exit status 2.
[[noreturn]] void usage_error(const CLI::App& app, const std::string& message);

// "-w,--warmup_iters" -> "-w,--warmup_iters,--warmup-iters": a long name
// with '_' or '-' is accepted in both spellings.
std::string with_both_spellings(const std::string& names);

// The name errors give an option: the first of `names` ("-e" of "-e,--maxbytes").
std::string first_name(const std::string& names);

// "bad size 'TEXT' for FLAG (WHY)", WHY from parse_size.
std::string bad_size_message(const std::string& flag, const std::string& text,
                             const std::string& why);

// A size in bytes (parse_size); a bad one is refused with bad_size_message.
CLI::Option* add_size(CLI::App& app, const std::string& names, uint64_t* bytes,
                      const std::string& help);

// "bad value 'TEXT' for FLAG (an integer in LO..HI)".
std::string bad_integer_message(const std::string& flag, const std::string& text,
                                const std::string& lo, const std::string& hi);

// An integer in lo..hi; anything else is refused with bad_integer_message.
template <typename T>
CLI::Option* add_integer(CLI::App& app, const std::string& names, T* out, T lo, T hi,
                         const std::string& help) {
  const std::string flag = first_name(names);
  CLI::Option* option = app.add_option_function<std::string>(
      names,
      [=](const std::string& text) {
        if (!parse_integer(text, lo, hi, out)) {
          throw CLI::ValidationError(
              bad_integer_message(flag, text, std::to_string(lo), std::to_string(hi)));
        }
      },
      help);
  return option->type_name("N");
}

// A finite real for which in_range holds; otherwise refused as
// "bad value 'TEXT' for FLAG (RANGE)", RANGE as given ("0 < R <= 1").
CLI::Option* add_real(CLI::App& app, const std::string& names, double* out,
                      std::function<bool(double)> in_range, const std::string& range,
                      const std::string& help);

// The value of a library enum named `text`, through its qc_*_from_name (any
// case, '-' as '_'); false if the library knows no such name.
template <typename E>
bool enum_from_name(qc_status_t (*from_name)(const char*, E*), const std::string& text, E* out) {
  return from_name(normalize_name(text).c_str(), out) == QC_SUCCESS;
}

// As enum_from_name, or a usage error "unknown WHAT 'TEXT' for FLAG (the
// library's names MORE)": enum_value(app, "codec", "-c", text, qc_codec_from_name,
// qc_codec_name).
template <typename E>
E enum_value(const CLI::App& app, const std::string& what, const std::string& flag,
             const std::string& text, qc_status_t (*from_name)(const char*, E*),
             const char* (*name_of)(E), const std::string& more = "") {
  E value{};
  if (!enum_from_name(from_name, text, &value)) {
    usage_error(app, "unknown " + what + " '" + text + "' for " + flag + " (" +
                         names_of(name_of) + more + ")");
  }
  return value;
}

}  // namespace qctool

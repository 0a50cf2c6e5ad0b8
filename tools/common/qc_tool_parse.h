// Parsing of the tools' option values that CLI11 does not know: sizes with a
// K/M/G suffix, strict integers and reals, comma-separated lists and the
// spelling of library names. Pure functions (tests/unit/test_tool_common.cpp).
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

namespace qctool {

// Bytes: "8", "64K", "128M", "1G" (also "64KB", "64KiB", "8B"; any case;
// powers of 1024). False, with the reason in *why, for anything else or for a
// size beyond 64 bits; *bytes is then unchanged.
bool parse_size(const std::string& text, uint64_t* bytes, std::string* why);

// A whole decimal number in lo..hi, digits only (a '-' first for signed T):
// no blanks, no '+', no suffix. False for anything else; *out is then unchanged.
template <typename T>
bool parse_integer(const std::string& text, T lo, T hi, T* out) {
  const char* end = text.data() + text.size();
  T v{};
  const std::from_chars_result r = std::from_chars(text.data(), end, v);
  if (text.empty() || r.ec != std::errc() || r.ptr != end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// A finite decimal number ("0.25", "1e-3"). False for anything else.
bool parse_real(const std::string& text, double* out);

// "a,b,,c" -> {"a", "b", "", "c"}: empty items are kept, so that the caller
// can refuse them by name.
std::vector<std::string> split_list(const std::string& text);

// The spelling the library's qc_*_from_name functions take: lower case, '-'
// as '_' ("Global-Linear" -> "global_linear").
std::string normalize_name(std::string name);

}  // namespace qctool

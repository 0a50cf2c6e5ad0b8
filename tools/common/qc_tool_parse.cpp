#include "qc_tool_parse.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace qctool {

namespace {

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// log2 of the multiplier a suffix stands for, or -1 for no suffix we know.
int suffix_shift(const std::string& suffix) {
  const std::string s = upper(suffix);
  if (s.empty() || s == "B") return 0;
  if (s == "K" || s == "KB" || s == "KIB") return 10;
  if (s == "M" || s == "MB" || s == "MIB") return 20;
  if (s == "G" || s == "GB" || s == "GIB") return 30;
  return -1;
}

}  // namespace

bool parse_size(const std::string& text, uint64_t* bytes, std::string* why) {
  const size_t digits = static_cast<size_t>(
      std::find_if(text.begin(), text.end(), [](char c) { return c < '0' || c > '9'; }) -
      text.begin());
  const int shift = suffix_shift(text.substr(digits));
  uint64_t number = 0;
  if (digits == 0 || shift < 0) {
    *why = "a whole number of bytes, optionally with a suffix K, M or G = 1024^1..3";
    return false;
  }
  if (!parse_integer(text.substr(0, digits), uint64_t{0}, std::numeric_limits<uint64_t>::max(),
                     &number) ||
      number > (std::numeric_limits<uint64_t>::max() >> shift)) {
    *why = "too large: at most 2^64 - 1 bytes";
    return false;
  }
  *bytes = number << shift;
  return true;
}

bool parse_real(const std::string& text, double* out) {
  // strtod rather than from_chars: the latter's double overload is missing
  // from some of the standard libraries the tools build with.
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::string normalize_name(std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace qctool

#include "qc_tool_json.h"

#include <cstdio>

namespace qctool {

namespace {

std::string dump(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

std::string json_text(const Json& doc) {
  if (!doc.is_array() || doc.empty()) return dump(doc, 2) + "\n";
  std::string out = "[";
  for (size_t i = 0; i < doc.size(); ++i) out += (i ? ",\n  " : "\n  ") + dump(doc[i], -1);
  return out + "\n]\n";
}

bool write_json_file(const std::string& tool, const std::string& path, const Json& doc) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "%s: error: cannot write the JSON file '%s'\n", tool.c_str(), path.c_str());
    return false;
  }
  const std::string text = json_text(doc);
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written) {
    std::fprintf(stderr, "%s: error: writing the JSON file '%s' failed\n", tool.c_str(),
                 path.c_str());
    return false;
  }
  return true;
}

}  // namespace qctool

// The tools' JSON output, on nlohmann::json: one way to build a document and
// one way to write it (qc-perf -J, qc-codec-bench -J, qc-fidelity --json).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace qctool {

// Keys keep the order they are set in: the field order of the files is part
// of what their readers see. A NaN or infinite number is written as null
// (JSON has neither), so a "not measured" NaN needs no special case.
using Json = nlohmann::ordered_json;

// The text of `doc`, ending in a newline: an array with one element a line
// (rows that grep and diff well), anything else indented by two spaces.
// Bytes that are not UTF-8 in a string (from a command line, say) come out
// as U+FFFD instead of failing the write.
std::string json_text(const Json& doc);

// Writes json_text(doc) to `path`. False, after "<tool>: error: ..." on
// stderr, when the file cannot be written.
bool write_json_file(const std::string& tool, const std::string& path, const Json& doc);

}  // namespace qctool

// Small pieces of the tools' reports: sizes and dates as they print them.
#pragma once

#include <cstdint>
#include <string>

namespace qctool {

// The largest binary unit that divides the size: "32 MiB", "1536 KiB", "7 B".
std::string human_bytes(uint64_t bytes);

// The command line as typed, arguments joined by blanks (for reports).
std::string command_line(int argc, char** argv);

// Now, in UTC: "2026-11-26T19:50:00Z".
std::string iso_date_utc();

}  // namespace qctool

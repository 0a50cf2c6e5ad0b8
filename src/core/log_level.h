// What a log line is (core/log.h): its own header so that the parameters
// (core/params.h), which log.cpp reads QC_DEBUG through, name the levels
// without including the log.
#pragma once

namespace qc {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

}  // namespace qc

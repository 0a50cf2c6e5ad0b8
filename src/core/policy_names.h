// The names of codecs and algorithms, as the API, the QC_* environment
// (core/params.h) and messages spell them: apart from the rest of
// core/policy.h so that the parameters, which the log reads QC_DEBUG
// through, need nothing that logs.
#pragma once

#include "qc.h"

namespace qc {

const char* codec_name(qc_codec_t codec);
const char* algorithm_name(qc_algorithm_t algorithm);

}  // namespace qc

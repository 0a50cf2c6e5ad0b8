// Entry points that name enum values (qc_codec_name, qc_codec_from_name, ...):
// the tables of core/enum_names.h.
#include <string>

#include "core/api_checks.h"
#include "core/api_guard.h"
#include "core/enum_names.h"

using namespace qc;

namespace {

// The caller's text for a message: at most 64 bytes, bytes outside
// printable ASCII as \xNN.
std::string shown(const char* text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  size_t i = 0;
  for (; text[i] != '\0' && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  out += text[i] == '\0' ? "\"" : "\"...";
  return out;
}

template <typename E>
qc_status_t from_name(const char* function, const EnumNames& table, const char* name,
                      const char* out_arg, E* out) {
  return api_call(function, [&]() -> Status {
    QC_RETURN_IF_ERROR(require(name, "name"));
    QC_RETURN_IF_ERROR(require(out, out_arg));
    int value = 0;
    if (!table.lookup(name, &value)) {
      return invalid_argument("argument 'name' (" + shown(name) + ") is not a " + table.what +
                              " name; the names are " + table.list());
    }
    *out = static_cast<E>(value);
    return Status::ok();
  });
}

}  // namespace

// qc_<kind>_name and qc_<kind>_from_name for one enum: its table, and the
// name of from_name's out argument in messages.
#define QC_ENUM_NAME_FUNCTIONS_(kind, type, table, out_arg)                       \
  QC_API const char* qc_##kind##_name(type value) { return table.name_of(value); } \
  QC_API qc_status_t qc_##kind##_from_name(const char* name, type* value) {        \
    return from_name("qc_" #kind "_from_name", table, name, out_arg, value);       \
  }

extern "C" {

QC_ENUM_NAME_FUNCTIONS_(codec, qc_codec_t, kCodecNames, "codec")
QC_ENUM_NAME_FUNCTIONS_(algorithm, qc_algorithm_t, kAlgorithmNames, "algorithm")
QC_ENUM_NAME_FUNCTIONS_(dtype, qc_dtype_t, kDtypeNames, "dtype")
QC_ENUM_NAME_FUNCTIONS_(reduce_op, qc_reduce_op_t, kReduceOpNames, "op")
QC_ENUM_NAME_FUNCTIONS_(rounding, qc_rounding_t, kRoundingNames, "rounding")
QC_ENUM_NAME_FUNCTIONS_(scale, qc_scale_t, kScaleNames, "scale")
QC_ENUM_NAME_FUNCTIONS_(transport, qc_transport_t, kTransportNames, "transport")
QC_ENUM_NAME_FUNCTIONS_(adapt_method, qc_adapt_method_t, kAdaptMethodNames, "method")

}  // extern "C"

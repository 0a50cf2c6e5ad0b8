// Reading and writing the ABI's growable structs (struct_size first).
// The library touches only the bytes the caller's struct_size covers, so a
// program built against an older qc.h keeps working with a newer library.
#pragma once

#include <cstring>
#include <string>

#include "core/status.h"

#define QC_STRINGIFY_INNER_(x) #x
#define QC_STRINGIFY_(x) QC_STRINGIFY_INNER_(x)
#define QC_VERSION_STRING_FOR_MESSAGES \
  QC_STRINGIFY_(QC_VERSION_MAJOR) "." QC_STRINGIFY_(QC_VERSION_MINOR) "." QC_STRINGIFY_(QC_VERSION_PATCH)

namespace qc {

// v0_size is the smallest layout ever released for T; anything smaller cannot
// be a real qc struct (typically an uninitialised struct_size).
template <typename T>
Status check_struct_size(const T* user, size_t v0_size, const char* arg, const char* type) {
  if (user == nullptr) return invalid_argument(std::string("argument '") + arg + "' is NULL");
  const size_t size = user->struct_size;
  if (size < v0_size) {
    return invalid_argument(std::string("argument '") + arg + "': struct_size " +
                            std::to_string(size) + " is smaller than the first " + type +
                            " layout (" + std::to_string(v0_size) + " bytes); set it to sizeof(" +
                            type + ") or use the initializer");
  }
  if (size > sizeof(T)) {
    return Status(QC_ERROR_VERSION,
                  std::string("argument '") + arg + "': struct_size " + std::to_string(size) +
                      " is larger than this library's " + type + " (" +
                      std::to_string(sizeof(T)) +
                      " bytes): the program was built against a newer qc.h than libqc " +
                      QC_VERSION_STRING_FOR_MESSAGES);
  }
  return Status::ok();
}

// Fields the caller's struct lacks keep their value in `defaults`.
template <typename T>
Status read_struct(const T* user, size_t v0_size, const T& defaults, const char* arg,
                   const char* type, T* out) {
  QC_RETURN_IF_ERROR(check_struct_size(user, v0_size, arg, type));
  *out = defaults;
  std::memcpy(static_cast<void*>(out), user, user->struct_size);
  out->struct_size = sizeof(T);
  return Status::ok();
}

template <typename T>
Status write_struct(const T& value, size_t v0_size, const char* arg, const char* type, T* user) {
  QC_RETURN_IF_ERROR(check_struct_size(user, v0_size, arg, type));
  const size_t size = user->struct_size;
  std::memcpy(static_cast<void*>(user), &value, size);
  user->struct_size = size;
  return Status::ok();
}

// qc_<struct>_init_sized: `defaults` for a caller's layout of `size`
// bytes, whatever *user held; nothing is read from it, and nothing is
// written when the size is refused.
template <typename T>
Status init_struct_sized(const T& defaults, size_t v0_size, const char* arg, const char* type,
                         T* user, size_t size) {
  if (user == nullptr) return invalid_argument(std::string("argument '") + arg + "' is NULL");
  if (size < v0_size) {
    return invalid_argument("argument 'struct_size' (" + std::to_string(size) +
                            ") is smaller than the first " + type + " layout (" +
                            std::to_string(v0_size) + " bytes); pass sizeof(" + type + ")");
  }
  if (size > sizeof(T)) {
    return Status(QC_ERROR_VERSION,
                  "argument 'struct_size' (" + std::to_string(size) + ") is larger than this "
                  "library's " + type + " (" + std::to_string(sizeof(T)) +
                  " bytes): the program was built against a newer qc.h than libqc " +
                  QC_VERSION_STRING_FOR_MESSAGES);
  }
  std::memcpy(static_cast<void*>(user), &defaults, size);
  user->struct_size = size;
  return Status::ok();
}

}  // namespace qc

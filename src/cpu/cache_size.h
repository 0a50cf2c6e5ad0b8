// How much of a call's output the caches can hold: a result larger than
// that is evicted before anything reads it again, so writing it through
// the caches only costs a read for ownership of every line (measured on
// this project's 2-core machine: 512 MiB written in 32 KiB pieces took
// 0.054 s with plain stores and 0.025 s streamed past the caches).
#pragma once

#include <cstddef>

namespace qc {
namespace cpu {

// The last-level cache the process's threads share, in bytes: what the OS
// reports (L3, else L2), else 32 MiB. Read once.
size_t last_level_cache_bytes();

// Whether `bytes` written by one call outgrow the cache: more than half the
// last-level cache (the other half holds what the call reads meanwhile).
bool outgrows_cache(size_t bytes);

// Tests: last_level_cache_bytes() returns `bytes` from now on (0: what the
// OS reports again), so a small call takes the path a huge one takes.
void set_last_level_cache_bytes_for_testing(size_t bytes);

}  // namespace cpu
}  // namespace qc

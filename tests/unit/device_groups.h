// The device-call tests' two groups of ranks (unit.host_staging over the
// local transport, unit.nccl_transport over the fake NCCL): per-rank fake
// devices with the CPU codecs over them standing in for the kernels, a
// `device` group that runs the calls under test on them and a `host` group
// whose host-memory calls give the reference results.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "fake_device.h"
#include "fake_device_codec.h"
#include "test_util.h"

// Per-rank fakes (a fake is not thread-safe), each codec checking that it is
// handed that rank's device memory, and the two groups. Declared first, the
// fakes outlive the groups, whose staging holds their memory.
struct TwoGroups {
  explicit TwoGroups(int n) : dev(n), mc(n), host(n), device(n) {
    for (int r = 0; r < n; ++r) mc[r].device = &dev[r];
  }
  std::vector<qcfake::FakeDevice> dev;
  std::vector<qcfake::CpuMessageCodec> mc;
  qct::Group host;
  qct::Group device;
};

inline ::testing::AssertionResult under_policy(TwoGroups& g, const qc_policy_t& p) {
  if (!g.host.ok() || !g.device.ok()) return ::testing::AssertionFailure() << "no groups";
  if (g.host.set_policy("*", p) != QC_SUCCESS || g.device.set_policy("*", p) != QC_SUCCESS) {
    return ::testing::AssertionFailure() << "set_policy: " << qc_last_error();
  }
  return ::testing::AssertionSuccess();
}

// Error buffers on both groups of a TwoGroups (none without feedback),
// destroyed with this.
struct PairedErrorBuffers {
  PairedErrorBuffers(const TwoGroups& g, size_t count, bool feedback)
      : host(g.host.size(), nullptr), device(g.device.size(), nullptr) {
    for (int r = 0; feedback && r < g.host.size(); ++r) {
      EXPECT_EQ(qc_error_buffer_create(g.host[r], count, &host[r]), QC_SUCCESS);
      EXPECT_EQ(qc_error_buffer_create(g.device[r], count, &device[r]), QC_SUCCESS);
    }
  }
  ~PairedErrorBuffers() {
    for (auto* list : {&host, &device}) {
      for (qc_error_buffer_t eb : *list) {
        if (eb != nullptr) qc_error_buffer_destroy(eb);
      }
    }
  }
  PairedErrorBuffers(const PairedErrorBuffers&) = delete;
  PairedErrorBuffers& operator=(const PairedErrorBuffers&) = delete;
  std::vector<qc_error_buffer_t> host, device;
};

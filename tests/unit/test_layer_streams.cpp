// Random streams keyed per layer (issue 30, item 6): stochastic rounding
// draws the bits of (seed, rank, layer, that layer's call index), so the
// emulation reproduces call k of a layer whatever other layers did in
// between, and qc_comm_save_state / qc_comm_load_state resume a layer's
// stream in a new communicator.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"

using namespace qct;

namespace {

using Matrix = std::vector<std::vector<float>>;

constexpr int kRanks = 4;
constexpr size_t kCount = 1000;

// 4-bit qsgd (minmax with error feedback, which qsgd's 4 bits would not
// keep contractive) with stochastic rounding: every output depends on the
// bits.
qc_policy_t stochastic_policy(qc_algorithm_t algo, bool error_feedback = false) {
  qc_policy_t p = make_policy(algo);
  p.codec = error_feedback ? QC_CODEC_MINMAX : QC_CODEC_QSGD;
  p.bits = 4;
  p.bucket_size = 64;
  p.rounding = QC_ROUND_STOCHASTIC;
  p.seed = 77;
  p.error_feedback = error_feedback ? 1 : 0;
  return p;
}

// One allreduce of `in` on every rank of g, layer `layer`; the outputs.
std::vector<Bytes> call_layer(Group& g, const char* layer, const std::vector<Bytes>& in,
                              size_t count, qc_error_buffer_t* ebs = nullptr) {
  const int n = g.size();
  std::vector<Bytes> out(static_cast<size_t>(n), Bytes(count * 4));
  std::vector<qc_status_t> status(static_cast<size_t>(n), QC_ERROR_INTERNAL);
  std::vector<std::string> error(static_cast<size_t>(n));
  run_ranks(n, [&](int r) {
    const auto ur = static_cast<size_t>(r);
    status[ur] = qc_allreduce(g[r], in[ur].data(), out[ur].data(), count, QC_DTYPE_FLOAT32,
                              QC_OP_SUM, layer, ebs != nullptr ? ebs[r] : nullptr, nullptr);
    if (status[ur] != QC_SUCCESS) error[ur] = qc_last_error();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(status[static_cast<size_t>(r)], QC_SUCCESS)
        << "layer " << (layer ? layer : "*") << ", rank " << r << ": "
        << error[static_cast<size_t>(r)];
  }
  return out;
}

std::vector<Bytes> inputs(uint64_t seed, size_t count = kCount) {
  return encode_all(random_inputs(kRanks, count, seed), QC_DTYPE_FLOAT32);
}

Bytes save_state(qc_comm_t comm) {
  size_t size = 0;
  EXPECT_EQ(qc_comm_save_state(comm, nullptr, 0, &size), QC_SUCCESS) << qc_last_error();
  Bytes image(size);
  EXPECT_EQ(qc_comm_save_state(comm, image.data(), image.size(), &size), QC_SUCCESS)
      << qc_last_error();
  EXPECT_EQ(size, image.size());
  return image;
}

Bytes save_error_buffer(qc_error_buffer_t eb) {
  size_t size = 0;
  EXPECT_EQ(qc_error_buffer_save(eb, nullptr, 0, &size), QC_SUCCESS) << qc_last_error();
  Bytes image(size);
  EXPECT_EQ(qc_error_buffer_save(eb, image.data(), image.size(), &size), QC_SUCCESS);
  return image;
}

class LayerStream : public ::testing::TestWithParam<qc_algorithm_t> {};

// The test: layer A's 5th call, after calls of B and C in between,
// is qc_emulate_allreduce(layer "A", call_index 4), bit for bit; the
// emulation of any other index is not (the bits do matter).
TEST_P(LayerStream, EmulationReproducesTheFifthCallOfALayer) {
  const qc_policy_t pol = stochastic_policy(GetParam());
  Group g(kRanks);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS) << qc_last_error();
  std::vector<Bytes> fifth;
  for (int k = 0; k < 5; ++k) {
    fifth = call_layer(g, "A", inputs(100), kCount);  // the same input every time
    call_layer(g, "B", inputs(200 + k, 300), 300);
    if (k % 2 == 0) call_layer(g, "C", inputs(300 + k), kCount);
    call_layer(g, nullptr, inputs(400 + k, 64), 64);
  }
  const auto emu = allreduce_emulate(kRanks, inputs(100), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, pol,
                                     nullptr, "A", 4);
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(bytes_equal(emu.out[static_cast<size_t>(r)], fifth[static_cast<size_t>(r)],
                            "emulated call 4 vs the 5th call"))
        << "rank " << r;
  }
  for (uint64_t other : {0u, 3u, 5u}) {
    const auto wrong = allreduce_emulate(kRanks, inputs(100), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                         pol, nullptr, "A", other);
    ASSERT_EQ(wrong.status, QC_SUCCESS) << wrong.error;
    EXPECT_NE(wrong.out[0], fifth[0]) << "call index " << other << " drew call 4's bits";
  }
  const auto other_layer = allreduce_emulate(kRanks, inputs(100), kCount, QC_DTYPE_FLOAT32,
                                             QC_OP_SUM, pol, nullptr, "B", 4);
  ASSERT_EQ(other_layer.status, QC_SUCCESS) << other_layer.error;
  EXPECT_NE(other_layer.out[0], fifth[0]) << "layer B's call 4 drew layer A's bits";
}

// With error feedback the emulation takes the residuals the real run had
// before that call (saved there, loaded into the emulation's buffers).
TEST_P(LayerStream, EmulationWithResidualsReproducesALaterCall) {
  const qc_policy_t pol = stochastic_policy(GetParam(), /*error_feedback=*/true);
  Group g(kRanks);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS) << qc_last_error();
  std::vector<qc_error_buffer_t> ebs(kRanks, nullptr), emu_ebs(kRanks, nullptr);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(qc_error_buffer_create(g[r], kCount, &ebs[static_cast<size_t>(r)]), QC_SUCCESS);
    ASSERT_EQ(qc_error_buffer_create(nullptr, kCount, &emu_ebs[static_cast<size_t>(r)]),
              QC_SUCCESS);
  }
  for (int k = 0; k < 3; ++k) {
    call_layer(g, "A", inputs(500 + k), kCount, ebs.data());
    call_layer(g, "B", inputs(600 + k, 128), 128);
  }
  for (int r = 0; r < kRanks; ++r) {
    const Bytes image = save_error_buffer(ebs[static_cast<size_t>(r)]);
    ASSERT_EQ(qc_error_buffer_load(emu_ebs[static_cast<size_t>(r)], image.data(), image.size()),
              QC_SUCCESS)
        << qc_last_error();
  }
  const auto fourth = call_layer(g, "A", inputs(503), kCount, ebs.data());
  const auto emu = allreduce_emulate(kRanks, inputs(503), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, pol,
                                     emu_ebs.data(), "A", 3);
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  for (int r = 0; r < kRanks; ++r) {
    const auto ur = static_cast<size_t>(r);
    EXPECT_EQ(emu.out[ur], fourth[ur]) << "rank " << r;
    EXPECT_EQ(save_error_buffer(emu_ebs[ur]), save_error_buffer(ebs[ur])) << "rank " << r;
  }
  for (auto eb : ebs) qc_error_buffer_destroy(eb);
  for (auto eb : emu_ebs) qc_error_buffer_destroy(eb);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, LayerStream,
                         ::testing::Values(QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA,
                                           QC_ALGO_TREE),
                         [](const ::testing::TestParamInfo<qc_algorithm_t>& i) {
                           return std::string(algo_name(i.param));
                         });

// A layer's bits do not depend on other layers' calls: two runs that
// interleave layer A's calls differently with others give A the same
// results; A's successive calls (same input) differ, so the index counts.
TEST(LayerStreams, OtherLayersDoNotMoveALayersStream) {
  const qc_policy_t pol = stochastic_policy(QC_ALGO_AUTO);
  std::vector<std::vector<Bytes>> alone, mixed;
  {
    Group g(kRanks);
    ASSERT_TRUE(g.ok());
    ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS);
    for (int k = 0; k < 3; ++k) alone.push_back(call_layer(g, "A", inputs(7), kCount));
  }
  {
    Group g(kRanks);
    ASSERT_TRUE(g.ok());
    ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS);
    call_layer(g, "B", inputs(8), kCount);
    mixed.push_back(call_layer(g, "A", inputs(7), kCount));
    call_layer(g, "C", inputs(9), kCount);
    call_layer(g, "C", inputs(9), kCount);
    mixed.push_back(call_layer(g, "A", inputs(7), kCount));
    call_layer(g, "B", inputs(8), kCount);
    mixed.push_back(call_layer(g, "A", inputs(7), kCount));
  }
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(alone[k], mixed[k]) << "layer A's call " << k;
  EXPECT_NE(alone[0][0], alone[1][0]) << "calls 0 and 1 of a layer drew the same bits";
  EXPECT_NE(alone[1][0], alone[2][0]) << "calls 1 and 2 of a layer drew the same bits";
}

// Each segment of a fused call counts as a call of its own layer: after a
// fused call over [A, B], A's next qc_allreduce is its call 1.
TEST(LayerStreams, FusedSegmentsCountForTheirLayers) {
  const qc_policy_t pol = stochastic_policy(QC_ALGO_AUTO);
  Group g(kRanks);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS);
  const size_t counts[2] = {kCount, 200};
  const char* layers[2] = {"A", "B"};
  const auto fused_in = inputs(11, kCount + 200);
  std::vector<Bytes> fused_out(kRanks, Bytes((kCount + 200) * 4));
  run_ranks(kRanks, [&](int r) {
    const auto ur = static_cast<size_t>(r);
    EXPECT_EQ(qc_allreduce_segments(g[r], fused_in[ur].data(), fused_out[ur].data(), 2, counts,
                                    layers, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr),
              QC_SUCCESS)
        << qc_last_error();
  });
  const auto second = call_layer(g, "A", inputs(12), kCount);
  const auto emu = allreduce_emulate(kRanks, inputs(12), kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, pol,
                                     nullptr, "A", 1);
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  EXPECT_EQ(emu.out, second);
  qc_layer_stats_t stats = QC_LAYER_STATS_INIT;
  ASSERT_EQ(qc_comm_get_layer_stats(g[0], "A", &stats), QC_SUCCESS);
  EXPECT_EQ(stats.calls, 2u);
}

// The alltoall takes the layer and call index too.
TEST(LayerStreams, EmulatedAlltoallReproducesALaterCall) {
  const qc_policy_t pol = stochastic_policy(QC_ALGO_AUTO);
  constexpr size_t kPerRank = 256;
  Group g(kRanks);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS);
  const auto in = inputs(21, kPerRank * kRanks);
  RunResult third;
  for (int k = 0; k < 3; ++k) {
    third = alltoall_on(g, in, kPerRank, QC_DTYPE_FLOAT32, "experts");
    ASSERT_TRUE(third.all_ok()) << third.describe();
    call_layer(g, "B", inputs(22 + k), kCount);
  }
  std::vector<Bytes> emu(kRanks, Bytes(kPerRank * kRanks * 4));
  std::vector<const void*> sp(kRanks);
  std::vector<void*> rp(kRanks);
  for (size_t r = 0; r < kRanks; ++r) {
    sp[r] = in[r].data();
    rp[r] = emu[r].data();
  }
  ASSERT_EQ(qc_emulate_alltoall(kRanks, sp.data(), rp.data(), kPerRank, QC_DTYPE_FLOAT32, "experts",
                                2, &pol),
            QC_SUCCESS)
      << qc_last_error();
  EXPECT_EQ(emu, third.out);
  ASSERT_EQ(qc_emulate_alltoall(kRanks, sp.data(), rp.data(), kPerRank, QC_DTYPE_FLOAT32, "experts",
                                0, &pol),
            QC_SUCCESS);
  EXPECT_NE(emu, third.out) << "call 0 drew call 2's bits";
}

// A run resumed in a fresh communicator from a saved state draws the bits
// the uninterrupted run draws; without the state it would not.
TEST(LayerStreams, LoadedStateResumesTheStream) {
  const qc_policy_t pol = stochastic_policy(QC_ALGO_AUTO);
  std::vector<Bytes> images;
  std::vector<Bytes> uninterrupted;
  {
    Group g(kRanks);
    ASSERT_TRUE(g.ok());
    ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS);
    for (int k = 0; k < 3; ++k) call_layer(g, "A", inputs(31 + k), kCount);
    call_layer(g, "B", inputs(40), kCount);
    for (int r = 0; r < kRanks; ++r) images.push_back(save_state(g[r]));
    uninterrupted = call_layer(g, "A", inputs(50), kCount);
  }
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(images[static_cast<size_t>(r)], images[0]);
  {
    Group fresh(kRanks);
    ASSERT_TRUE(fresh.ok());
    ASSERT_EQ(fresh.set_policy("*", pol), QC_SUCCESS);
    EXPECT_NE(call_layer(fresh, "A", inputs(50), kCount), uninterrupted)
        << "a fresh communicator drew the resumed bits without the state";
  }
  Group resumed(kRanks);
  ASSERT_TRUE(resumed.ok());
  ASSERT_EQ(resumed.set_policy("*", pol), QC_SUCCESS);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(qc_comm_load_state(resumed[r], images[0].data(), images[0].size()), QC_SUCCESS)
        << qc_last_error();
  }
  EXPECT_EQ(save_state(resumed[1]), images[0]) << "the loaded state saves as it was saved";
  EXPECT_EQ(call_layer(resumed, "A", inputs(50), kCount), uninterrupted);
}

// Bad images leave the communicator as it was; the image's checks.
TEST(LayerStreams, BadImagesAreRefusedAndChangeNothing) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  const std::vector<Bytes> one = {encode(std::vector<float>(16, 1.0f), QC_DTYPE_FLOAT32)};
  Bytes out(16 * 4);
  for (const char* layer : {"fc1", "fc2", "fc1"}) {
    ASSERT_EQ(qc_allreduce(g[0], one[0].data(), out.data(), 16, QC_DTYPE_FLOAT32, QC_OP_SUM, layer,
                           nullptr, nullptr),
              QC_SUCCESS);
  }
  const Bytes image = save_state(g[0]);
  ASSERT_EQ(image.size(), 24u + 2 * (16 + 3));

  auto expect_refused = [&](Bytes bad, const char* says) {
    EXPECT_EQ(qc_comm_load_state(g[0], bad.data(), bad.size()), QC_ERROR_CORRUPT_DATA) << says;
    EXPECT_NE(std::strstr(qc_last_error(), says), nullptr) << qc_last_error();
    EXPECT_EQ(save_state(g[0]), image) << "a refused image changed the state (" << says << ")";
  };
  Bytes flipped = image;
  flipped[30] ^= 0x10;  // inside the first name's length
  expect_refused(flipped, "fails its checksum");
  expect_refused(Bytes(image.begin(), image.end() - 1), "fails its checksum");
  expect_refused(Bytes(image.begin(), image.begin() + 10), "shorter than its 24-byte header");
  Bytes magic = image;
  magic[3] = 'X';
  expect_refused(magic, "does not start with \"QCCS\"");
  Bytes version = image;
  version[4] = 9;
  expect_refused(version, "format version 9");

  // An image that passes its checksum but lies about its layers: rebuilt
  // with a correct checksum (FNV-1a 64 of bytes [0, 16) and the entries).
  auto with_checksum = [](Bytes b) {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](const uint8_t* p, size_t n) {
      for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    };
    mix(b.data(), 16);
    mix(b.data() + 24, b.size() - 24);
    for (int i = 0; i < 8; ++i) b[16 + static_cast<size_t>(i)] = static_cast<uint8_t>(h >> (8 * i));
    return b;
  };
  ASSERT_EQ(qc_comm_load_state(g[0], with_checksum(image).data(), image.size()), QC_SUCCESS)
      << "the test's checksum is not the image's";
  Bytes more = image;
  more[8] = 3;  // three layers announced, two present
  expect_refused(with_checksum(more), "ends inside layer 2");
  Bytes fewer = image;
  fewer[8] = 1;
  expect_refused(with_checksum(fewer), "bytes after its 1 layers");
  Bytes swapped = image;  // "fc1" and "fc2" both named "fc2": a duplicate
  swapped[24 + 8 + 2] = '2';
  expect_refused(with_checksum(swapped), "out of order or twice");

  size_t size = 0;
  EXPECT_EQ(qc_comm_save_state(g[0], out.data(), 3, &size), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(size, image.size()) << "the size needed is still reported";
  EXPECT_EQ(qc_comm_save_state(g[0], nullptr, 0, nullptr), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_load_state(g[0], nullptr, 24), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_save_state(nullptr, nullptr, 0, &size), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_load_state(nullptr, image.data(), image.size()), QC_ERROR_INVALID_ARGUMENT);
}

// A state loaded on one rank only: the ranks' call indices differ, and the
// next call of the layer fails on every rank instead of drawing bits that
// no emulation reproduces.
TEST(LayerStreams, StateLoadedOnOneRankOnlyIsAMismatch) {
  Group g(2);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", stochastic_policy(QC_ALGO_RING)), QC_SUCCESS);
  const Bytes empty = save_state(g[0]);
  const auto in = encode_all(random_inputs(2, 64, 3), QC_DTYPE_FLOAT32);
  std::vector<Bytes> out(2, Bytes(64 * 4));
  run_ranks(2, [&](int r) {
    EXPECT_EQ(qc_allreduce(g[r], in[r].data(), out[r].data(), 64, QC_DTYPE_FLOAT32, QC_OP_SUM, "A",
                           nullptr, nullptr),
              QC_SUCCESS);
  });
  ASSERT_EQ(qc_comm_load_state(g[0], empty.data(), empty.size()), QC_SUCCESS);
  std::vector<qc_status_t> status(2);
  run_ranks(2, [&](int r) {
    status[r] = qc_allreduce(g[r], in[r].data(), out[r].data(), 64, QC_DTYPE_FLOAT32, QC_OP_SUM,
                             "A", nullptr, nullptr);
  });
  EXPECT_EQ(status[0], QC_ERROR_MISMATCH);
  EXPECT_EQ(status[1], QC_ERROR_MISMATCH);
}

}  // namespace

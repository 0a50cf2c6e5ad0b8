// qc-emulate-bound: how fast an emulation executor could run a ring
// allreduce, by the order it plays the ranks' steps in (issue 36). Each
// order runs the ring's arithmetic through the public codec API only, with
// no transport, on T threads, and must give qc_emulate_allreduce's bytes:
//
//   lockstep  every rank's step k, then step k+1 (a round-based batch);
//             each rank's partial sum in a scratch block of its own
//   chain     block by block: a block's partial sum goes through its n-1
//             hops while it is in cache (the steps of one rank touch
//             disjoint blocks, so this order computes the same sums)
//   shared    chain, and each allgather block decoded once for all ranks
//             and copied to the others (every rank decodes the same bytes)
//
// Prints the best of -i runs of each next to qc_emulate_allreduce itself.
// minmax with rounding to nearest: an encode then depends only on the
// values, so a block encoded here is the bytes the ring sends.
#include <qc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

namespace {

using Clock = std::chrono::steady_clock;

struct Ring {
  int n = 0;
  size_t count = 0, block = 0, capacity = 0;
  qc_policy_t policy{};
  std::vector<std::vector<float>> in, out;
};

void check(qc_status_t s, const char* what) {
  if (s != QC_SUCCESS) {
    std::fprintf(stderr, "qc-emulate-bound: %s: %s\n", what, qc_last_error());
    std::exit(1);
  }
}

// Runs body(t) on threads 0..T-1 (the caller's is not one of them, as an
// executor's pool would not be).
void parallel(int threads, const std::function<void(int)>& body) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(body, t);
  for (auto& th : pool) th.join();
}

struct Message {
  std::vector<uint8_t> bytes;
  size_t size = 0;
};

void encode(const Ring& g, const float* src, Message* m) {
  check(qc_codec_encode(&g.policy, src, g.block, QC_DTYPE_FLOAT32, m->bytes.data(),
                        m->bytes.size(), &m->size), "encode");
}
void decode(const Ring& g, const Message& m, float* dst) {
  check(qc_codec_decode(m.bytes.data(), m.size, dst, g.block, QC_DTYPE_FLOAT32), "decode");
}
// dst = given + decode(m), as the ring's copy and decode-add give it.
void decode_add(const Ring& g, const Message& m, const float* given, float* tmp, float* dst) {
  decode(g, m, tmp);
  for (size_t i = 0; i < g.block; ++i) dst[i] = given[i] + tmp[i];
}

size_t mod(long long a, int n) { return static_cast<size_t>(((a % n) + n) % n); }

void run_lockstep(Ring& g, int threads) {
  const int n = g.n;
  const size_t bc = g.block;
  std::vector<Message> msg(n), next(n);
  for (int r = 0; r < n; ++r) msg[r].bytes.resize(g.capacity), next[r].bytes.resize(g.capacity);
  std::vector<std::vector<float>> partial(n, std::vector<float>(bc));
  auto rounds = [&](const std::function<void(int, std::vector<float>&)>& rank_step) {
    parallel(threads, [&](int t) {
      std::vector<float> tmp(bc);
      for (int r = t; r < n; r += threads) rank_step(r, tmp);
    });
  };
  rounds([&](int r, std::vector<float>&) { encode(g, g.in[r].data() + r * bc, &msg[r]); });
  for (int k = 0; k < n - 1; ++k) {
    rounds([&](int r, std::vector<float>& tmp) {
      const size_t b = mod(r - k - 1, n);
      decode_add(g, msg[(r + n - 1) % n], g.in[r].data() + b * bc, tmp.data(), partial[r].data());
      encode(g, partial[r].data(), &next[r]);
    });
    std::swap(msg, next);
  }
  // msg[r]: rank r's encode of its reduced block r+1, decoded by everyone.
  rounds([&](int r, std::vector<float>&) {
    for (int o = 0; o < n; ++o) decode(g, msg[o], g.out[r].data() + mod(o + 1, n) * bc);
  });
}

void run_chains(Ring& g, int threads, bool shared) {
  const int n = g.n;
  const size_t bc = g.block;
  parallel(threads, [&](int t) {
    std::vector<float> partial(bc), tmp(bc);
    Message m;
    m.bytes.resize(g.capacity);
    for (int b = t; b < n; b += threads) {
      const size_t off = static_cast<size_t>(b) * bc;
      encode(g, g.in[b].data() + off, &m);  // rank b's step 0
      for (int k = 1; k < n; ++k) {        // hop k: rank b+k adds its input
        decode_add(g, m, g.in[(b + k) % n].data() + off, tmp.data(), partial.data());
        encode(g, partial.data(), &m);
      }
      for (int r = 0; r < n; ++r) {
        if (shared && r > 0) {
          std::memcpy(g.out[r].data() + off, g.out[0].data() + off, bc * sizeof(float));
        } else {
          decode(g, m, g.out[r].data() + off);
        }
      }
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"qc-emulate-bound: a ring allreduce's arithmetic played in three orders, "
               "against qc_emulate_allreduce"};
  int n = 128, threads = 2, iters = 5;
  size_t count = 1 << 20;
  app.add_option("-n,--ranks", n, "virtual ranks")->check(CLI::Range(2, 4096));
  app.add_option("-c,--count", count, "float32 values per rank, a multiple of ranks x 128")
      ->check(CLI::PositiveNumber);
  app.add_option("-t,--threads", threads, "threads for the three orders")->check(CLI::Range(1, 256));
  app.add_option("-i,--iters", iters, "runs of each; the best is printed")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  if (count % (static_cast<size_t>(n) * 128) != 0) {
    std::fprintf(stderr, "qc-emulate-bound: --count %zu is not a multiple of %d ranks x 128\n",
                 count, n);
    return 2;
  }
  Ring g;
  g.n = n;
  g.count = count;
  g.block = count / n;
  qc_policy_init(&g.policy);
  g.policy.codec = QC_CODEC_MINMAX;
  g.policy.bits = 4;
  g.policy.bucket_size = 128;
  g.policy.rounding = QC_ROUND_NEAREST_EVEN;
  g.policy.min_compress_bytes = 0;
  check(qc_codec_encoded_size(&g.policy, g.block, &g.capacity),
        "encoded size");
  g.in.assign(n, std::vector<float>(count));
  g.out.assign(n, std::vector<float>(count));
  for (int r = 0; r < n; ++r) {
    uint32_t x = 2463534242u + static_cast<uint32_t>(r);  // xorshift32: any values will do
    for (auto& v : g.in[r]) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      v = static_cast<float>(x) * (2.0f / 4294967296.0f) - 1.0f;
    }
  }
  std::vector<std::vector<float>> want(n, std::vector<float>(count));
  std::vector<const void*> sends(n);
  std::vector<void*> recvs(n);
  for (int r = 0; r < n; ++r) sends[r] = g.in[r].data(), recvs[r] = want[r].data();
  g.policy.algorithm = QC_ALGO_RING;

  auto best_of = [&](const std::function<void()>& fn) {
    double best = 1e30;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
  };
  const double t_qc = best_of([&] {
    check(qc_emulate_allreduce(n, sends.data(), recvs.data(), count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                               nullptr, 0, &g.policy, nullptr), "qc_emulate_allreduce");
  });
  std::printf("| ranks x floats | threads | qc_emulate_allreduce | lockstep | chain | shared |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  const std::pair<const char*, std::function<void()>> orders[] = {
      {"lockstep", [&] { run_lockstep(g, threads); }},
      {"chain", [&] { run_chains(g, threads, false); }},
      {"shared", [&] { run_chains(g, threads, true); }},
  };
  double t[3];
  for (int o = 0; o < 3; ++o) {
    for (auto& v : g.out) std::fill(v.begin(), v.end(), -1.0f);
    t[o] = best_of(orders[o].second);
    for (int r = 0; r < n; ++r) {
      if (std::memcmp(g.out[r].data(), want[r].data(), count * sizeof(float)) != 0) {
        std::fprintf(stderr, "qc-emulate-bound: order '%s' differs from qc_emulate_allreduce "
                             "on rank %d\n", orders[o].first, r);
        return 1;
      }
    }
  }
  std::printf("| %d x %zu | %d | %.4f s | %.4f s | %.4f s | %.4f s |\n", n, count, threads, t_qc,
              t[0], t[1], t[2]);
  std::printf("# every order gave qc_emulate_allreduce's bytes on every rank\n");
  return 0;
}

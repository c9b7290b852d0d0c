// The depthwise convolution's two kernels (src/cpu/conv.h) side by side on MobileNet-v3-large's
// depthwise shapes (and two more 56 x 56 ones), ReLU, random inputs: the best of 300 calls each,
// in microseconds, on THREADS threads of the intra-op pool (default 1). Built on request only:
//   ninja -C build onyx_cpu_depthwise_bench && build/onyx_cpu_depthwise_bench [THREADS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cpu/conv.h"
#include "cpu/thread_pool.h"

int main(int argc, char** argv) {
  using onyx::cpu::DepthwiseConv2d;
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  if (threads < 1) {
    std::fprintf(stderr, "usage: %s [THREADS >= 1]\n", argv[0]);
    return 2;
  }
  onyx::cpu::ThreadPool pool(threads);
  onyx::cpu::PoolScope scope(&pool);
  std::printf("%d thread(s)\n", threads);
  struct Shape {
    const char* name;
    int64_t channels, size, k, stride;
  };
  const Shape shapes[] = {{"features.1", 16, 112, 3, 1},  {"features.2", 64, 112, 3, 2}, {"features.3", 72, 56, 3, 1},
                          {"features.4", 72, 56, 5, 2},   {"features.5", 120, 28, 5, 1}, {"features.7", 240, 28, 3, 2},
                          {"features.12", 672, 14, 3, 1}, {"features.13", 672, 14, 5, 2}, {"features.15", 960, 7, 5, 1},
                          {"56x56 c64", 64, 56, 3, 1},    {"56x56 c80", 80, 56, 3, 1}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::printf("%-12s %8s %5s %4s %7s %10s %10s %6s\n", "layer", "channels", "size", "k", "stride", "flat us", "blocked us",
              "auto");
  for (const Shape& s : shapes) {
    DepthwiseConv2d a;
    a.channels = s.channels, a.ih = a.iw = s.size, a.kh = a.kw = s.k, a.sh = a.sw = s.stride;
    a.ph = a.pw = s.k / 2;
    a.oh = a.ow = (s.size + 2 * a.ph - s.k) / s.stride + 1;
    std::vector<float> x(s.channels * s.size * s.size), w(s.channels * s.k * s.k), b(s.channels);
    std::vector<float> y(s.channels * a.oh * a.ow);
    for (auto* v : {&x, &w, &b})
      for (float& f : *v) f = uniform(rng);
    a.x = x.data(), a.w = w.data(), a.bias = b.data(), a.y = y.data();
    a.act.kind = onyx::cpu::Act::kRelu;
    double best[2];
    for (int p = 0; p < 2; ++p) {
      a.path = p ? DepthwiseConv2d::Path::kBlocked : DepthwiseConv2d::Path::kFlat;
      best[p] = 1e30;
      for (int r = 0; r < 300; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        onyx::cpu::depthwise_conv2d(a);
        const auto t1 = std::chrono::steady_clock::now();
        best[p] = std::min(best[p], std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
    }
    const bool blocked = a.iw < 32;  // the rule in src/cpu/conv.cpp
    std::printf("%-12s %8ld %5ld %4ld %7ld %10.1f %10.1f %6s\n", s.name, static_cast<long>(s.channels),
                static_cast<long>(s.size), static_cast<long>(s.k), static_cast<long>(s.stride), best[0], best[1],
                blocked ? "blocked" : "flat");
  }
}

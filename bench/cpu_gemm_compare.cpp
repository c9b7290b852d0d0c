// onyx's float32 matrix product (src/cpu/gemm.h) against OpenBLAS and oneDNN on the shapes of
// the CPU suite, one thread, thread CPU time (the least disturbed figure on a shared machine):
// the measurement behind the choice of onyx's own kernels (docs/cpu-speed.md, "Matrix products").
//
// Not part of the build (oneDNN is no dependency of onyx). From the repository root:
//   apt-get install libdnnl-dev
//   g++ -std=c++20 -O2 -Isrc -DHWY_SHARED_DEFINE "-DHWY_DISABLED_TARGETS=(HWY_SSSE3|HWY_SSE4|HWY_AVX3_DL)" \
//       bench/cpu_gemm_compare.cpp src/cpu/gemm.cpp src/cpu/rowwise.cpp src/cpu/thread_pool.cpp \
//       -o /tmp/cpu_gemm_compare -lhwy -lopenblas -ldnnl -lpthread
//   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /tmp/cpu_gemm_compare            # OpenBLAS as it picks its kernels
//   OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /tmp/cpu_gemm_compare
// Arguments pick other shapes: M,K,N[*COUNT] each (COUNT: how often a model runs it, for the
// weighted total printed last), or `resnet50` for that network's convolutions as products
// (M output channels, K input channels x kernel area, N output pixels; batch 1, 224 px).
#include <cblas.h>
#include <dnnl.h>
#include <openblas_config.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cpu/gemm.h"

extern "C" char* openblas_get_corename(void);

namespace {

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

template <class F>
double best_of(int reps, F f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t = cpu_ms();
    f();
    best = std::min(best, cpu_ms() - t);
  }
  return best;
}

}  // namespace

struct Shape {
  int m, k, n, count;
};

// ResNet-50 v1.5 (the stride on the 3x3 convolution) at 224 px, batch 1: each convolution as the
// product weights [Cout x Cin k k] by the image [Cin k k x pixels], with how often it occurs.
const std::vector<Shape> kResnet50 = {
    {64, 147, 12544, 1},                                                                    // stem 7x7
    {64, 64, 3136, 1},    {64, 576, 3136, 3},   {256, 64, 3136, 4},  {64, 256, 3136, 2},   // stage 1
    {128, 256, 3136, 1},  {128, 1152, 784, 4},  {512, 128, 784, 4},  {512, 256, 784, 1},   // stage 2
    {128, 512, 784, 3},                                                                     //
    {256, 512, 784, 1},   {256, 2304, 196, 6},  {1024, 256, 196, 6}, {1024, 512, 196, 1},  // stage 3
    {256, 1024, 196, 5},                                                                    //
    {512, 1024, 196, 1},  {512, 4608, 49, 3},   {2048, 512, 49, 3},  {2048, 1024, 49, 1},  // stage 4
    {512, 2048, 49, 2},   {1, 2048, 1000, 1}};                                              // fc

int main(int argc, char** argv) {
  std::printf("onyx kernels: %s; OpenBLAS core: %s\n", onyx::cpu::simd_target(), openblas_get_corename());
  std::printf("%5s %5s %6s | %12s %12s %12s %12s | ms, best of reps (GFLOP/s of onyx packed)\n", "M", "K", "N",
              "OpenBLAS", "oneDNN", "onyx packed", "onyx +pack");
  std::vector<Shape> shapes = {{1, 768, 768, 1},   {1, 768, 3072, 1},  {1, 3072, 768, 1},  {1, 768, 50257, 1},
                               {4, 512, 512, 1},   {16, 768, 768, 1},  {128, 768, 768, 1}, {128, 768, 3072, 1},
                               {128, 3072, 768, 1}, {197, 768, 3072, 1}, {64, 576, 3136, 1}, {256, 64, 3136, 1}};
  if (argc > 1) shapes.clear();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "resnet50") {
      shapes.insert(shapes.end(), kResnet50.begin(), kResnet50.end());
      continue;
    }
    Shape s{0, 0, 0, 1};
    if (std::sscanf(arg.c_str(), "%d,%d,%d*%d", &s.m, &s.k, &s.n, &s.count) < 3 || s.m < 1 || s.k < 1 || s.n < 1) {
      std::fprintf(stderr, "cpu_gemm_compare: '%s' is not M,K,N[*COUNT] or resnet50\n", arg.c_str());
      return 2;
    }
    shapes.push_back(s);
  }
  double total[4] = {};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const auto& s : shapes) {
    const int m = s.m, k = s.k, n = s.n;
    std::vector<float> a(size_t(m) * k), b(size_t(k) * n), c(size_t(m) * n), packed(onyx::cpu::packed_size(k, n));
    for (auto& x : a) x = u(rng);
    for (auto& x : b) x = u(rng);
    onyx::cpu::pack_b(b.data(), n, false, k, n, packed.data());
    const int reps = m == 1 ? 30 : 10;
    const double blas = best_of(reps, [&] {
      if (m == 1)
        cblas_sgemv(CblasRowMajor, CblasTrans, k, n, 1.f, b.data(), n, a.data(), 1, 0.f, c.data(), 1);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f,
                    c.data(), n);
    });
    const double dnnl = best_of(reps, [&] { dnnl_sgemm('N', 'N', m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c.data(), n); });
    const double own = best_of(reps, [&] { onyx::cpu::gemm_packed(m, n, k, a.data(), k, packed.data(), c.data(), n); });
    const double own_pack =
        best_of(reps, [&] { onyx::cpu::gemm(false, false, m, n, k, a.data(), k, b.data(), n, c.data(), n); });
    std::printf("%5d %5d %6d | %12.3f %12.3f %12.3f %12.3f | %.1f%s\n", m, k, n, blas, dnnl, own, own_pack,
                2.0 * m * n * k / own / 1e6, s.count > 1 ? (" x" + std::to_string(s.count)).c_str() : "");
    const double t[4] = {blas, dnnl, own, own_pack};
    for (int i = 0; i < 4; ++i) total[i] += s.count * t[i];
  }
  std::printf("%18s | %12.3f %12.3f %12.3f %12.3f | total ms, each shape times its count\n", "", total[0], total[1],
              total[2], total[3]);
  return 0;
}

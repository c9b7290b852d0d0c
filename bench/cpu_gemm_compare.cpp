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
#include <cblas.h>
#include <dnnl.h>
#include <openblas_config.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
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

int main() {
  std::printf("onyx kernels: %s; OpenBLAS core: %s\n", onyx::cpu::simd_target(), openblas_get_corename());
  std::printf("%5s %5s %6s | %12s %12s %12s %12s | ms, best of reps (GFLOP/s of onyx packed)\n", "M", "K", "N",
              "OpenBLAS", "oneDNN", "onyx packed", "onyx +pack");
  const int shapes[][3] = {{1, 768, 768},   {1, 768, 3072},  {1, 3072, 768},  {1, 768, 50257}, {4, 512, 512},
                           {16, 768, 768},  {128, 768, 768}, {128, 768, 3072}, {128, 3072, 768}, {197, 768, 3072},
                           {64, 576, 3136}, {256, 64, 3136}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const auto& s : shapes) {
    const int m = s[0], k = s[1], n = s[2];
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
    std::printf("%5d %5d %6d | %12.3f %12.3f %12.3f %12.3f | %.1f\n", m, k, n, blas, dnnl, own, own_pack,
                2.0 * m * n * k / own / 1e6);
  }
  return 0;
}

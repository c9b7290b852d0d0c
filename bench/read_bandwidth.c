// How fast this machine's cores read memory: the floor under a decode step on the CPU, which
// reads every weight once per token. Sums a buffer larger than the caches with 512-bit loads,
// on 1..N threads (OpenMP), and prints the best of several passes in GB/s.
//
//   cc -O3 -mavx512f -fopenmp bench/read_bandwidth.c -o build-bench/read_bandwidth
//   build-bench/read_bandwidth [MiB (default 1024)] [max threads (default: all)]
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const size_t bytes = (size_t)(argc > 1 ? atol(argv[1]) : 1024) << 20;
  const int max_threads = argc > 2 ? atoi(argv[2]) : omp_get_num_procs();
  float* a = aligned_alloc(64, bytes);
  if (!a) {
    fprintf(stderr, "read_bandwidth: cannot allocate %zu MiB\n", bytes >> 20);
    return 1;
  }
  memset(a, 0, bytes);  // touch every page before timing
  const size_t n = bytes / sizeof(float);
  for (int threads = 1; threads <= max_threads; ++threads) {
    double best = 1e30;
    float sink = 0.f;
    for (int pass = 0; pass < 10; ++pass) {
      const double t0 = now();
      float total = 0.f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
      {
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
#pragma omp for schedule(static)
        for (size_t i = 0; i < n; i += 64) {
          s0 = _mm512_add_ps(s0, _mm512_load_ps(a + i));
          s1 = _mm512_add_ps(s1, _mm512_load_ps(a + i + 16));
          s2 = _mm512_add_ps(s2, _mm512_load_ps(a + i + 32));
          s3 = _mm512_add_ps(s3, _mm512_load_ps(a + i + 48));
        }
        total += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
      }
      const double t = now() - t0;
      if (t < best) best = t;
      sink += total;
    }
    printf("threads %d: %.2f GB/s (best of 10 passes over %zu MiB)%s\n", threads, bytes / best / 1e9, bytes >> 20,
           sink == 1.f ? " " : "");
  }
  free(a);
  return 0;
}

// The bulk-copy engine (Hopper's TMA without a tensor map) and the shared-memory barriers its
// copies complete on, as the streaming product kernels use them (linear.cu's 16-bit weights,
// matmul_nbits.cu's 4-bit ones): one thread asks for a copy of a contiguous run of global memory
// into shared memory, the copy counts its bytes on a barrier, and the warps wait on that barrier's
// phase. A stage refilled after the warps read it needs `fence.proxy.async.shared::cta` between
// their reads and the refill (the copy engine is another proxy).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace onyx::cuda {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A barrier expecting one arrival (the thread that sets the byte count) per phase.
__device__ __forceinline__ void barrier_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(bar)) : "memory");
}

// Arrives on the barrier and adds `bytes` to the bytes its phase waits for.
__device__ __forceinline__ void barrier_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}

// Waits until the barrier's phase of this parity has completed.
__device__ __forceinline__ void barrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_address(bar)),
      "r"(parity)
      : "memory");
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` into shared
// `dst`, completing on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_address(dst)),
               "l"(src), "r"(bytes), "r"(smem_address(bar))
               : "memory");
}

// Between the warps' reads of a stage and the copy engine's refill of it.
__device__ __forceinline__ void fence_before_refill() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// After barrier_init, before any copy completes on the barriers.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

}  // namespace onyx::cuda

// Programmatic dependent launch (Hopper): a kernel launched with launch_kernel (or
// launch_clusters) may start while the kernel before it on the stream is still running, once
// every block of that kernel has called allow_dependent_grids (or exited). Until
// wait_for_prior_grids returns it must read nothing the earlier kernels write and write nothing
// at all; what it may do is load what no kernel writes (weights), e.g. ask L2 for them with
// prefetch_l2 (the matrix-product kernel of linear.cu; the decode attention asks for its keys).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

// Blocks until the grids this one depends on have completed and their writes are visible; a
// no-op for a kernel launched the ordinary way.
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel, when launched with launch_overlapped, start before this one ends.
__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Asks L2 for `bytes` (a multiple of 16) at the 16-byte-aligned `p`, without waiting.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// The first statement of every onyx kernel: with launch_kernel, a kernel may be resident before
// the kernel it follows on the stream has finished (its launch overlaps that kernel's tail); it
// waits here until that kernel's writes are visible, then lets the next kernel launch likewise.
#define ONYX_KERNEL_PROLOGUE()                \
  do {                                        \
    ::onyx::cuda::wait_for_prior_grids();     \
    ::onyx::cuda::allow_dependent_grids();    \
  } while (0)

// Launches `kernel` on cu.stream with `smem` bytes of dynamic shared memory, as a programmatic
// dependent of the kernel before it when cu.overlap_launches is set. Every kernel launched so
// must begin with ONYX_KERNEL_PROLOGUE (or call wait_for_prior_grids before its first read of
// anything an earlier kernel writes, and before any write).
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, const CudaContext& cu,
                   Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = cu.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = cu.overlap_launches ? 1 : 0;
  ONYX_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// The configuration of a launch in clusters of `cluster` blocks along x (a programmatic dependent
// of the kernel before it on `stream` where `overlap`), for cudaLaunchKernelEx and for the
// occupancy queries that take one (cudaOccupancyMaxActiveClusters). Past 8 blocks a cluster is
// Hopper's non-portable size, which the kernel must allow first
// (cudaFuncAttributeNonPortableClusterSizeAllowed). Not copyable: cfg points into attr.
struct ClusterLaunch {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2] = {};
  ClusterLaunch(dim3 grid, dim3 block, size_t smem, unsigned cluster, cudaStream_t stream, bool overlap) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = overlap ? 2 : 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// launch_kernel in clusters of `cluster` blocks along x (the blocks of a cluster share their
// shared memory); the kernel begins with ONYX_KERNEL_PROLOGUE as launch_kernel's do.
template <class... Params, class... Args>
void launch_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, unsigned cluster,
                     const CudaContext& cu, Args&&... args) {
  ClusterLaunch launch(grid, block, smem, cluster, cu.stream, cu.overlap_launches);
  ONYX_CUDA_CHECK(cudaLaunchKernelEx(&launch.cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace onyx::cuda

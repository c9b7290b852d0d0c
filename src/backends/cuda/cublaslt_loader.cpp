// cuBLASLt, loaded when the first CUDA session starts rather than when the program
// does: linking libcublasLt directly maps and relocates it at every start, which cost
// a CPU-only `onyx run` about 200 MiB of resident memory. Each function onyx calls is
// defined here and forwards to the library's own, found with dlsym on first use.
#include <cublasLt.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

namespace {

void* library(std::string* why = nullptr) {
  static void* handle = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so"}) {
      handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle) return;
    }
    const char* e = dlerror();
    error = e ? e : "libcublasLt.so.13 could not be loaded";
  });
  if (why) *why = error;
  return handle;
}

template <class Fn>
Fn resolve(const char* name) {
  void* h = library();
  return h ? reinterpret_cast<Fn>(dlsym(h, name)) : nullptr;
}

}  // namespace

namespace onyx::cuda {
// "" when cuBLASLt can be used, else why not (for the backend's error message).
std::string cublaslt_unavailable_reason() {
  std::string why;
  return library(&why) ? "" : why;
}
}  // namespace onyx::cuda

#define ONYX_FORWARD(ret, name, params, args, fail)                      \
  extern "C" ret name params {                                           \
    static const auto fn = resolve<decltype(&name)>(#name);             \
    return fn ? fn args : fail;                                          \
  }

ONYX_FORWARD(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * h), (h), CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t h), (h), CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(const char*, cublasLtGetStatusName, (cublasStatus_t s), (s), "CUBLAS_STATUS (cuBLASLt not loaded)")
ONYX_FORWARD(const char*, cublasLtGetStatusString, (cublasStatus_t s), (s), "cuBLASLt is not loaded")
ONYX_FORWARD(cublasStatus_t, cublasLtMatmulDescCreate,
             (cublasLtMatmulDesc_t * d, cublasComputeType_t c, cudaDataType_t s), (d, c, s),
             CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d), CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(cublasStatus_t, cublasLtMatmulDescSetAttribute,
             (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* b, size_t n), (d, a, b, n),
             CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(cublasStatus_t, cublasLtMatrixLayoutCreate,
             (cublasLtMatrixLayout_t * l, cudaDataType t, uint64_t r, uint64_t c, int64_t ld), (l, t, r, c, ld),
             CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l),
             CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(cublasStatus_t, cublasLtMatrixLayoutSetAttribute,
             (cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void* b, size_t n), (l, a, b, n),
             CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * p), (p),
             CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p), (p),
             CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
             (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void* b, size_t n),
             (p, a, b, n), CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
             (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t o, cublasLtMatmulPreference_t p, int n,
              cublasLtMatmulHeuristicResult_t r[], int* found),
             (h, d, a, b, c, o, p, n, r, found), CUBLAS_STATUS_NOT_INITIALIZED)
ONYX_FORWARD(cublasStatus_t, cublasLtMatmul,
             (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* A, cublasLtMatrixLayout_t a,
              const void* B, cublasLtMatrixLayout_t b, const void* beta, const void* C, cublasLtMatrixLayout_t c,
              void* D, cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t* algo, void* ws, size_t wsn,
              cudaStream_t s),
             (h, d, alpha, A, a, B, b, beta, C, c, D, dd, algo, ws, wsn, s), CUBLAS_STATUS_NOT_INITIALIZED)

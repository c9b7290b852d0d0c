// onyx's fused products (passes/fuse_linear.h): the linear ops' cases of the CUDA kernel table.
#include "harness.h"

namespace onyx::cuda::test {

// onyx::Linear and onyx::SiluGateLinear (src/ops/linear_ops.cpp): up to 8 rows of x in onyx's
// own kernel (each row bound 1, 2, 4, 8; K a whole number of 16-byte packs, with and without a
// partial last step; outputs past a warp's last row), more rows or K off the packs through
// cuBLASLt.
void linear_cases(std::vector<Case>& v) {
  auto lin = [&](std::string name, Shape x, int64_t n, int64_t k, std::vector<int64_t> splits = {}) {
    std::vector<Attribute> at;
    if (!splits.empty()) at.push_back(attr_ints("splits", splits));
    const int outs = splits.empty() ? 1 : static_cast<int>(splits.size());
    v.push_back({std::move(name), "Linear", kFloats, {Uni(std::move(x), -1, 1), Uni({n, k}, -1, 1)}, at, outs, 1,
                 "onyx"});
  };
  lin("row1", {1, 1, 256}, 48, 256);
  lin("row1_tail", {1, 1, 2056}, 33, 2056);
  lin("rows2_splits", {2, 1, 520}, 40, 520, {8, 24, 8});
  lin("rows3", {3, 64}, 65, 64);
  lin("rows5_splits", {5, 1, 264}, 31, 264, {1, 30});
  lin("rows8", {2, 4, 136}, 97, 136);
  lin("k_off_packs", {2, 12}, 9, 12);
  // The streaming kernel (one or two 16-bit rows): more tiles than SMs (blocks take several),
  // a row in five chunks with a short last one.
  lin("row1_many_tiles", {1, 64}, 4500, 64, {4000, 500});
  lin("rows2_k8200", {2, 8200}, 40, 8200);
  // 16-bit K of 2048: each tile's rows as one copy, the last tile partial.
  lin("row1_k2048_one_copy", {1, 2048}, 4100, 2048, {4000, 100});
  lin("rows2_k2048_one_copy", {2, 1, 2048}, 37, 2048);
  // The streaming kernel's tensor-core form (three to eight 16-bit rows): whole-row tiles with a
  // partial last tile and many tiles per block, a row in two chunks with a short last one (the
  // warps' last steps partial), splits; x wider than the kernel keeps in shared memory (32 KiB)
  // read from global memory as the warps go (batch 8's down projection), at one row too.
  lin("rows8_k2048_one_copy", {8, 2048}, 4100, 2048, {4000, 100});
  lin("rows3_k3000_chunks", {3, 3000}, 70, 3000);
  lin("rows5_k2048_splits", {5, 1, 2048}, 50, 2048, {16, 30, 4});
  lin("rows4_k8192_x_global", {4, 8192}, 24, 8192);
  lin("rows8_k8192_x_global_splits", {8, 8192}, 200, 8192, {64, 136});
  lin("row1_k20480_x_global", {1, 20480}, 40, 20480);
  lin("rows9_lt", {9, 72}, 40, 72, {16, 24});
  lin("rows64_lt", {4, 16, 128}, 96, 128, {32, 64});
  // With a bias (Qwen2's q, k and v; biases_into_linear): added to the sums in each kernel's
  // epilogue (one row, the streaming kernel's tensor-core form, the few-row kernel for float32),
  // and through cuBLASLt's epilogue where each output's bias is 16-byte aligned, or a kernel after
  // the product where it is not (splits of 3 and 29 columns).
  auto lin_bias = [&](std::string name, Shape x, int64_t n, int64_t k, std::vector<int64_t> splits = {}) {
    std::vector<Attribute> at;
    if (!splits.empty()) at.push_back(attr_ints("splits", splits));
    const int outs = splits.empty() ? 1 : static_cast<int>(splits.size());
    v.push_back({std::move(name), "Linear", kFloats, {Uni(std::move(x), -1, 1), Uni({n, k}, -1, 1), Uni({n}, -1, 1)},
                 at, outs, 1, "onyx"});
  };
  lin_bias("bias_row1_splits", {1, 1, 256}, 48, 256, {16, 16, 16});
  lin_bias("bias_rows2_k2048_splits", {2, 1, 2048}, 50, 2048, {16, 30, 4});
  lin_bias("bias_rows8_k8192_x_global", {8, 8192}, 24, 8192);
  lin_bias("bias_rows3_k_off_packs", {3, 12}, 9, 12);
  lin_bias("bias_rows16_lt_aligned", {16, 128}, 40, 128, {8, 32});
  lin_bias("bias_rows16_lt_unaligned", {16, 128}, 32, 128, {3, 29});
  auto gated = [&](std::string name, Shape x, int64_t f, int64_t k, std::string act = "") {
    std::vector<Attribute> at;
    if (!act.empty()) at.push_back(attr_string("activation", act));
    v.push_back({std::move(name),
                 "SiluGateLinear",
                 kFloats,
                 {Uni(std::move(x), -1, 1), Uni({2 * f, k}, -1, 1)},
                 std::move(at),
                 1,
                 1,
                 "onyx"});
  };
  gated("row1", {1, 1, 256}, 24, 256);
  gated("rows2_tail", {2, 1040}, 33, 1040);
  gated("rows4", {1, 4, 64}, 7, 64);
  gated("row1_many_tiles", {1, 1, 128}, 1500, 128);
  gated("row1_k2048_two_copies", {1, 2048}, 1003, 2048);  // a tile's gate rows, then its up rows
  gated("rows8", {8, 64}, 17, 64);
  gated("k_off_packs", {3, 20}, 5, 20);
  gated("rows8_k2048_two_copies", {8, 2048}, 203, 2048);
  gated("rows6_tail", {2, 3, 1040}, 33, 1040);
  gated("rows40_lt", {40, 96}, 50, 96);
  gated("rows6_k4096_x_global", {6, 4096}, 45, 4096);
  // Gemma's GELU gates (the tanh form and erf's) in each kernel: one row (streaming), 8 rows
  // (tensor cores), float32's few-row kernel at 3 rows, cuBLASLt then the gating at 40.
  for (const char* act : {"gelu_tanh", "gelu"}) {
    const std::string a = act;
    gated(a + "_row1", {1, 1, 256}, 24, 256, a);
    gated(a + "_rows8_k2048", {8, 2048}, 203, 2048, a);
    gated(a + "_rows3_tail", {3, 1040}, 33, 1040, a);
    gated(a + "_rows40_lt", {40, 96}, 50, 96, a);
  }
  // onyx::RmsNormLinear: x, skip, gamma, w -> sum, y...: the norm in the kernel's prologue (few
  // rows) or into the workspace before cuBLASLt (more rows).
  auto normed = [&](std::string name, Shape x, bool skip, int64_t n, int64_t k, std::vector<int64_t> splits,
                    bool gate, std::string act = "") {
    std::vector<Attribute> at{attr_float("epsilon", 1e-5f)};
    if (!splits.empty()) at.push_back(attr_ints("splits", splits));
    if (gate) at.push_back(attr_int("gated", 1));
    if (!act.empty()) at.push_back(attr_string("activation", act));
    const int outs = 1 + (gate || splits.empty() ? 1 : static_cast<int>(splits.size()));
    v.push_back({std::move(name), "RmsNormLinear", kFloats,
                 {Uni(x, -2, 2), skip ? Uni(x, -2, 2) : None(), Pos({k}, 0.5, 1.5), Uni({n, k}, -1, 1)}, at, outs, 1,
                 "onyx"});
  };
  normed("row1_skip_splits", {1, 1, 256}, true, 48, 256, {16, 32}, false);
  normed("rows3_no_skip", {3, 512}, false, 40, 512, {}, false);
  normed("rows2_gated_tail", {2, 1, 2056}, true, 66, 2056, {}, true);
  normed("rows2_gated_k2048", {2, 1, 2048}, true, 406, 2048, {}, true);  // 203 outputs
  normed("rows8_splits", {8, 128}, true, 24, 128, {8, 8, 8}, false);
  normed("rows8_gated_k2048", {8, 2048}, true, 406, 2048, {}, true);  // a batch-8 decode step's MLP
  normed("rows4_skip_splits_k2048", {4, 1, 2048}, true, 96, 2048, {64, 16, 16}, false);
  normed("rows7_no_skip", {7, 1024}, false, 40, 1024, {}, false);
  normed("rows12_lt", {12, 128}, true, 32, 128, {8, 24}, false);
  normed("rows8_k4096_lt", {8, 4096}, true, 40, 4096, {}, false);  // normalized x too wide for the kernel
  normed("rows40_lt_gated", {40, 96}, true, 100, 96, {}, true);
  normed("row1_gated_gelu_tanh_k2048", {1, 1, 2048}, true, 406, 2048, {}, true, "gelu_tanh");  // Gemma's MLP, decode
  normed("rows8_gated_gelu_k2048", {8, 2048}, true, 406, 2048, {}, true, "gelu");
  normed("rows40_lt_gated_gelu_tanh", {40, 96}, true, 100, 96, {}, true, "gelu_tanh");
  // With a bias (not gated): in the kernel's epilogue, and through cuBLASLt.
  auto normed_bias = [&](std::string name, Shape x, int64_t n, int64_t k, std::vector<int64_t> splits) {
    std::vector<Attribute> at{attr_float("epsilon", 1e-5f), attr_ints("splits", splits)};
    v.push_back({std::move(name), "RmsNormLinear", kFloats,
                 {Uni(x, -2, 2), Uni(x, -2, 2), Pos({k}, 0.5, 1.5), Uni({n, k}, -1, 1), Uni({n}, -1, 1)}, at,
                 1 + static_cast<int>(splits.size()), 1, "onyx"});
  };
  normed_bias("bias_row1_skip_splits_k2048", {1, 1, 2048}, 96, 2048, {64, 16, 16});
  normed_bias("bias_rows8_splits", {8, 128}, 24, 128, {8, 8, 8});
  normed_bias("bias_rows12_lt", {12, 128}, 32, 128, {3, 29});
}

}  // namespace onyx::cuda::test

// The recurrent layers' shared kernel (ops/rnn.cpp), for the ops that run an LSTM with other
// weights: com.microsoft DynamicQuantizeLSTM (ops/quant_contrib.cpp) supplies integer
// products of 8-bit weights in place of the float ones.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "ops/op.h"

namespace onyx {

struct RnnDims {
  int64_t seq, batch, input, hidden, dirs;
  bool batch_first;
};

// The two matrix products of a layer, per direction k, with G * hidden gate columns:
struct RecurrentProducts {
  // X W_k^T for every step and row: [(t * batch + b), G * hidden].
  std::function<std::vector<double>(int64_t k)> input;
  // h R_k^T for the rows of h ([batch, hidden]) at one step: [batch, G * hidden].
  std::function<std::vector<double>(int64_t k, const std::vector<double>& h)> recurrent;
  // R in ONNX's layout: GRU's reset gate multiplies inside its product (GRU only).
  std::shared_ptr<const std::vector<double>> recurrent_weights;
};

// Checks B, sequence_lens, initial_h, initial_c and P (inputs 3 to 7) against d.
void check_rnn_state_inputs(const InferContext& ctx, const RnnDims& d, int64_t gates, bool lstm);

// Runs an LSTM whose other inputs (X, B, sequence_lens, initial_h, initial_c, P) and
// attributes are LSTM's, at LSTM's input positions, into ctx's outputs.
void run_lstm(KernelContext& ctx, const RnnDims& d, const RecurrentProducts& products);

}  // namespace onyx

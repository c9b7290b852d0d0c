// Losses: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss.
#include "ops/common.h"

namespace onyx {

void register_loss_ops(OpRegistry& r) {}

}  // namespace onyx

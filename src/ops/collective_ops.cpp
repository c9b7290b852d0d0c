// The collectives of tensor parallelism (passes/shard.h), on the CPU:
//
//   onyx::AllReduce(x) -> y: the sum over the group's ranks of each rank's x (float32).
//   onyx::AllGather(x) -> y: every rank's x, concatenated along `axis` in rank order.
//
// Attributes: communicator (the group's number, onyx/communicator.h), rank, and for AllGather
// world and axis. Every rank's graph calls the same collectives in the same order (the planner's
// topological order of the same sharded graph); a rank whose partners do not come gets an error
// naming the collective, never a hang (the communicator's timeout).
#include <cstring>

#include "onyx/communicator.h"
#include "ops/common.h"

namespace onyx {

namespace {

std::shared_ptr<Communicator> group_of(const KernelContext& ctx) {
  std::shared_ptr<Communicator> c = find_communicator(ctx.attr_int("communicator"));
  ONYX_CHECK(c, "the tensor-parallel group of this node is gone (its sessions' communicator was released)");
  return c;
}

void infer_all_gather(InferContext& ctx) {
  const int64_t world = ctx.attr_int("world");
  ONYX_CHECK(world >= 1, "world must be at least 1, got ", world);
  PartialShape s = ctx.input_shape(0);
  if (s.rank_known) {
    const int64_t axis = normalize_axis(ctx.attr_int("axis", -1), static_cast<int64_t>(s.dims.size()));
    if (s.dims[axis] != PartialShape::kUnknown) s.dims[axis] *= world;
  }
  ctx.set_output(0, ctx.input_dtype(0), s);
}

void all_reduce_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ONYX_CHECK(x.dtype() == DType::kFloat32, "AllReduce on the CPU takes float32, got ", x.type_str());
  group_of(ctx)->all_reduce_sum(static_cast<int>(ctx.attr_int("rank")), x.data<float>(),
                                ctx.output(0).data<float>(), static_cast<size_t>(x.numel()));
}

void all_gather_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ONYX_CHECK(!dtype_is_object(x.dtype()), "AllGather takes numeric tensors, got ", x.type_str());
  std::shared_ptr<Communicator> c = group_of(ctx);
  const int64_t world = ctx.attr_int("world");
  ONYX_CHECK(world == c->world(), "AllGather: the node says ", world, " ranks, its group has ", c->world());
  const int64_t rank = x.rank();
  ONYX_CHECK(rank >= 1, "AllGather needs x of rank >= 1, got ", x.type_str());
  const int64_t axis = normalize_axis(ctx.attr_int("axis", -1), rank);
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[i];
  for (int64_t i = axis; i < rank; ++i) inner *= s[i];  // this rank's block of one outer index
  const size_t es = dtype_size(x.dtype()), block = static_cast<size_t>(inner) * es;
  // Every rank's x, then each outer index's blocks side by side.
  std::vector<char> all(static_cast<size_t>(world) * x.bytes());
  c->all_gather(static_cast<int>(ctx.attr_int("rank")), x.raw(), all.data(), x.bytes());
  char* y = static_cast<char*>(ctx.output(0).raw());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < world; ++r)
      std::memcpy(y + (o * world + r) * block, all.data() + r * x.bytes() + o * block, block);
}

}  // namespace

void register_collective_ops(OpRegistry& r) {
  OpDef reduce = domain_op("onyx", "AllReduce", 1, [](InferContext& ctx) { infer_same_as_input(ctx); },
                           all_reduce_kernel);
  reduce.foldable = false;  // its result is the group's, not a function of this graph's values
  r.add(std::move(reduce));
  OpDef gather = domain_op("onyx", "AllGather", 1, infer_all_gather, all_gather_kernel);
  gather.foldable = false;
  r.add(std::move(gather));
}

}  // namespace onyx

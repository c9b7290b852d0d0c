#include "ops/rotary.h"

namespace onyx {

RotaryGeometry onnx_rotary_geometry(const NodeView& n, const Shape& xs, const Shape& cs, const Shape& sin,
                                    const Shape* position_ids) {
  ONYX_CHECK(xs.rank() == 3 || xs.rank() == 4, "X must be 3-D or 4-D, got ", xs.str());
  ONYX_CHECK(cs == sin, "cos_cache ", cs.str(), " and sin_cache ", sin.str(), " differ");
  RotaryGeometry g;
  g.B = xs[0];
  if (xs.rank() == 4) {
    g.bhsd = true;
    g.H = xs[1];
    g.S = xs[2];
    g.D = xs[3];
  } else {
    g.H = n.attr_int("num_heads", 0);
    ONYX_CHECK(g.H > 0 && xs[2] % g.H == 0, "3-D X needs num_heads dividing its hidden size ", xs[2]);
    g.S = xs[1];
    g.D = xs[2] / g.H;
  }
  g.rot = n.attr_int("rotary_embedding_dim", 0);
  if (g.rot == 0) g.rot = g.D;
  ONYX_CHECK(g.rot > 0 && g.rot <= g.D && g.rot % 2 == 0, "rotary_embedding_dim ", g.rot,
             " must be even and at most the head size ", g.D);
  g.half = g.rot / 2;
  g.interleaved = n.attr_int("interleaved", 0) != 0;
  ONYX_CHECK(cs.rank() >= 2 && cs[cs.rank() - 1] == g.half, "cos_cache's last dimension must be ", g.half,
             " (rotary_embedding_dim / 2), got shape ", cs.str());
  if (position_ids) {
    ONYX_CHECK(position_ids->numel() == g.B * g.S, "position_ids must be [", g.B, ", ", g.S, "], got ",
               position_ids->str());
    ONYX_CHECK(cs.rank() == 2, "with position_ids the caches must be 2-D, got ", cs.str());
    g.rows = RotaryGeometry::Rows::kPositionIds;
    g.cache_rows = cs[0];
  } else {
    ONYX_CHECK(cs.rank() == 3 && (cs[0] == g.B || cs[0] == 1) && cs[1] == g.S, "without position_ids the caches must be [",
               g.B, ", ", g.S, ", ", g.half, "], got ", cs.str());
    g.rows = RotaryGeometry::Rows::kPerToken;
    g.cache_batch1 = cs[0] == 1;
    g.cache_rows = cs[0] * cs[1];
  }
  return g;
}

RotaryGeometry ms_rotary_geometry(const NodeView& n, const Shape& xs, const Shape& ps, const Shape& cs,
                                  const Shape& sin) {
  ONYX_CHECK(xs.rank() == 3 || xs.rank() == 4, "input must be 3-D or 4-D, got ", xs.str());
  ONYX_CHECK(cs.rank() == 2 && cs == sin, "cos_cache and sin_cache must be equal 2-D shapes, got ", cs.str(), " and ",
             sin.str());
  RotaryGeometry g;
  g.B = xs[0];
  g.S = xs[1];
  g.half = cs[1];
  const int64_t rot_attr = n.attr_int("rotary_embedding_dim", 0);
  if (xs.rank() == 4) {
    g.H = xs[2];
    g.D = xs[3];
  } else {
    g.H = n.attr_int("num_heads", 0);
    const int64_t per_head = rot_attr > 0 ? rot_attr : 2 * g.half;
    if (g.H == 0 && per_head > 0) g.H = xs[2] / per_head;
    ONYX_CHECK(g.H > 0 && xs[2] % g.H == 0, "cannot split hidden size ", xs[2], " into heads");
    g.D = xs[2] / g.H;
  }
  g.rot = rot_attr > 0 ? rot_attr : 2 * g.half;
  ONYX_CHECK(g.rot > 0 && g.rot == 2 * g.half && g.rot <= g.D, "rotary_embedding_dim ", g.rot,
             " does not match the cache width ", g.half, " or head size ", g.D);
  ONYX_CHECK(ps.numel() == 1 || ps.numel() == g.B * g.S, "position_ids must be [", g.B, ", ", g.S, "] or [1], got ",
             ps.str());
  g.rows = ps.numel() == 1 ? RotaryGeometry::Rows::kPositionOffset : RotaryGeometry::Rows::kPositionIds;
  g.cache_rows = cs[0];
  g.interleaved = n.attr_int("interleaved", 0) != 0;
  return g;
}

}  // namespace onyx

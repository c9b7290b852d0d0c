#include "plan/placement.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "onyx/error.h"

namespace onyx {

namespace {

// Places buffers in `order`, each at the lowest-waste gap among placed buffers that overlap it in time.
Placement place_in_order(const std::vector<BufferLife>& buffers, const std::vector<size_t>& order, std::string name) {
  Placement p;
  p.algorithm = std::move(name);
  p.offsets.assign(buffers.size(), 0);
  std::vector<size_t> placed;
  placed.reserve(buffers.size());
  for (size_t idx : order) {
    const BufferLife& b = buffers[idx];
    // Intervals taken by overlapping placed buffers, sorted by offset.
    std::vector<std::pair<size_t, size_t>> taken;
    for (size_t j : placed)
      if (lifetimes_overlap(b, buffers[j])) taken.emplace_back(p.offsets[j], p.offsets[j] + buffers[j].bytes);
    std::sort(taken.begin(), taken.end());
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const auto& [start, end] : taken) {
      if (start > cursor) {
        size_t gap = start - cursor;
        if (gap >= b.bytes && gap < best_gap) {
          best_gap = gap;
          best = cursor;
        }
      }
      cursor = std::max(cursor, end);
    }
    if (best == SIZE_MAX) best = cursor;  // after everything it overlaps
    p.offsets[idx] = best;
    p.arena_bytes = std::max(p.arena_bytes, best + b.bytes);
    placed.push_back(idx);
  }
  return p;
}

std::vector<size_t> indices(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

Placement place_greedy_by_size(const std::vector<BufferLife>& buffers) {
  auto order = indices(buffers.size());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });
  return place_in_order(buffers, order, "greedy-by-size");
}

Placement place_greedy_by_first_use(const std::vector<BufferLife>& buffers) {
  auto order = indices(buffers.size());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].first != buffers[b].first) return buffers[a].first < buffers[b].first;
    return buffers[a].bytes > buffers[b].bytes;
  });
  return place_in_order(buffers, order, "greedy-by-first-use");
}

namespace {
Placement place_greedy_by_area(const std::vector<BufferLife>& buffers) {
  // Size times duration: long-lived large buffers first, so short ones fill around them.
  auto order = indices(buffers.size());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    double ka = double(buffers[a].bytes) * (buffers[a].last - buffers[a].first + 1);
    double kb = double(buffers[b].bytes) * (buffers[b].last - buffers[b].first + 1);
    if (ka != kb) return ka > kb;
    return buffers[a].first < buffers[b].first;
  });
  return place_in_order(buffers, order, "greedy-by-area");
}
}  // namespace

Placement place_best(const std::vector<BufferLife>& buffers) {
  Placement best = place_greedy_by_size(buffers);
  for (Placement p : {place_greedy_by_first_use(buffers), place_greedy_by_area(buffers)})
    if (p.arena_bytes < best.arena_bytes) best = std::move(p);
  return best;
}

size_t lower_bound_bytes(const std::vector<BufferLife>& buffers, int* peak_step) {
  // Sweep the step boundaries: +bytes at first, -bytes after last.
  std::map<int, long long> delta;
  for (const auto& b : buffers) {
    delta[b.first] += static_cast<long long>(b.bytes);
    delta[b.last + 1] -= static_cast<long long>(b.bytes);
  }
  long long live = 0, best = 0;
  int best_step = delta.empty() ? -1 : delta.begin()->first;
  for (const auto& [step, d] : delta) {
    live += d;
    if (live > best) {
      best = live;
      best_step = step;
    }
  }
  if (peak_step) *peak_step = best_step;
  return static_cast<size_t>(best);
}

std::string verify_placement(const std::vector<BufferLife>& buffers, const Placement& p) {
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (p.offsets[i] + buffers[i].bytes > p.arena_bytes) return cat("buffer ", i, " ends past the arena");
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      if (!lifetimes_overlap(buffers[i], buffers[j]) || !buffers[i].bytes || !buffers[j].bytes) continue;
      bool disjoint = p.offsets[i] + buffers[i].bytes <= p.offsets[j] || p.offsets[j] + buffers[j].bytes <= p.offsets[i];
      if (!disjoint) return cat("buffers ", i, " and ", j, " are live together and share bytes");
    }
  }
  return "";
}

}  // namespace onyx

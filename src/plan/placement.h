// Placing buffers with known lifetimes at byte offsets of one arena, so that two
// buffers live at the same step never share a byte (DESIGN L3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "onyx/checked.h"

namespace onyx {

struct BufferLife {
  int first = 0;     // first step at which the buffer is live
  int last = 0;      // last step at which it is live (inclusive)
  size_t bytes = 0;  // already aligned
};

struct Placement {
  std::vector<size_t> offsets;  // per buffer
  size_t arena_bytes = 0;
  std::string algorithm;
};

inline bool lifetimes_overlap(const BufferLife& a, const BufferLife& b) {
  return a.first <= b.last && b.first <= a.last;
}

// Greedy by size (Pisarchyk & Lee, 2020, offset calculation): largest first, each
// into the smallest gap between already placed buffers whose lifetimes overlap.
Placement place_greedy_by_size(const std::vector<BufferLife>& buffers);
// The same best-fit rule in order of first use (the order an online allocator sees).
Placement place_greedy_by_first_use(const std::vector<BufferLife>& buffers);
// Greedy by size with longer lifetimes first among equal sizes... and any other
// ordering we add: runs every algorithm and keeps the smallest arena.
Placement place_best(const std::vector<BufferLife>& buffers);

// The bytes live at the busiest step: no placement can use less.
size_t lower_bound_bytes(const std::vector<BufferLife>& buffers, int* peak_step = nullptr);
// Checks that no two overlapping buffers share a byte; returns "" or what is wrong.
std::string verify_placement(const std::vector<BufferLife>& buffers, const Placement& p);

inline size_t align_up(size_t bytes, size_t alignment) { return checked_align_up(bytes, alignment); }

}  // namespace onyx

#include "serve/metrics.h"

#include <cmath>
#include <sstream>

#include "onyx/error.h"

namespace onyx::serve {

namespace {

const std::vector<double> kLatency = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
const std::vector<double> kRows = {1, 2, 4, 8, 16, 32, 64, 128, 256};

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::ostringstream s;
  s.precision(12);
  s << v;
  return s.str();
}

}  // namespace

Metrics::Metrics() {
  auto c = [&](const char* n, const char* h) { families_[n] = {"counter", h, {}}; };
  auto g = [&](const char* n, const char* h) { families_[n] = {"gauge", h, {}}; };
  auto hist = [&](const char* n, const char* h, const std::vector<double>& b) { families_[n] = {"histogram", h, b}; };
  c("onyx_requests_total", "HTTP requests answered, by endpoint and status code");
  c("onyx_prompt_tokens_total", "prompt tokens of admitted requests");
  c("onyx_prompt_tokens_cached_total", "prompt tokens whose cache entries a slot already held (not prefilled)");
  c("onyx_generation_tokens_total", "tokens generated");
  c("onyx_sequences_finished_total", "sequences ended, by reason (stop, length, cancelled, error)");
  c("onyx_requests_rejected_total", "requests refused because the queue was full");
  c("onyx_decode_steps_total", "decode steps run");
  c("onyx_prefill_runs_total", "prefill runs (prompt chunks)");
  c("onyx_decode_replays_total", "decode and prefill runs replayed from a captured graph");
  c("onyx_decode_eager_total", "planned runs that did not replay a captured graph");
  g("onyx_sequences_running", "sequences holding a slot (prefilling or decoding)");
  g("onyx_requests_waiting", "requests waiting for a slot");
  g("onyx_slots", "slots (sequences that can decode at once)");
  g("onyx_kv_cache_positions_used", "cache positions holding a running sequence's entries");
  g("onyx_kv_cache_positions", "cache positions of all slots");
  g("onyx_kv_cache_usage_ratio", "positions used over positions");
  g("onyx_kv_cache_bytes", "bytes of the slots' cache");
  hist("onyx_time_to_first_token_seconds", "from the request's arrival to its first token", kLatency);
  hist("onyx_inter_token_latency_seconds", "between a sequence's consecutive tokens", kLatency);
  hist("onyx_request_duration_seconds", "from arrival to the last token", kLatency);
  hist("onyx_queue_wait_seconds", "from arrival to taking a slot", kLatency);
  hist("onyx_decode_batch_rows", "sequences decoding in each decode step (batch occupancy)", kRows);
}

std::string Metrics::family_of(const std::string& series) { return series.substr(0, series.find('{')); }

void Metrics::add(const std::string& series, double v) {
  std::lock_guard<std::mutex> lk(mu_);
  ONYX_ASSERT(families_.count(family_of(series)), "metric ", series, " is not declared");
  values_[series] += v;
}

void Metrics::set(const std::string& series, double v) {
  std::lock_guard<std::mutex> lk(mu_);
  ONYX_ASSERT(families_.count(family_of(series)), "metric ", series, " is not declared");
  values_[series] = v;
}

double Metrics::value(const std::string& series) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = values_.find(series);
  return it == values_.end() ? 0 : it->second;
}

void Metrics::observe(const std::string& family, double v) {
  std::lock_guard<std::mutex> lk(mu_);
  auto f = families_.find(family);
  ONYX_ASSERT(f != families_.end() && f->second.type == "histogram", "histogram ", family, " is not declared");
  Histogram& h = histograms_[family];
  h.counts.resize(f->second.bounds.size());
  for (size_t i = 0; i < f->second.bounds.size(); ++i)
    if (v <= f->second.bounds[i]) {
      ++h.counts[i];
      break;
    }
  h.sum += v;
  ++h.count;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::ostringstream out;
  for (const auto& [name, f] : families_) {
    out << "# HELP " << name << ' ' << f.help << "\n# TYPE " << name << ' ' << f.type << '\n';
    if (f.type == "histogram") {
      auto it = histograms_.find(name);
      const Histogram h = it == histograms_.end() ? Histogram{std::vector<double>(f.bounds.size()), 0, 0} : it->second;
      double cumulative = 0;
      for (size_t i = 0; i < f.bounds.size(); ++i) {
        cumulative += h.counts[i];
        out << name << "_bucket{le=\"" << number(f.bounds[i]) << "\"} " << number(cumulative) << '\n';
      }
      out << name << "_bucket{le=\"+Inf\"} " << number(h.count) << '\n';
      out << name << "_sum " << number(h.sum) << '\n' << name << "_count " << number(h.count) << '\n';
      continue;
    }
    bool any = false;
    for (const auto& [series, v] : values_)
      if (family_of(series) == name) {
        out << series << ' ' << number(v) << '\n';
        any = true;
      }
    if (!any) out << name << " 0\n";
  }
  return out.str();
}

}  // namespace onyx::serve

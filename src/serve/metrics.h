// The server's figures in Prometheus' text format (GET /metrics): counters, gauges and
// histograms, each family declared once with its help text, updated from any thread.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace onyx::serve {

class Metrics {
 public:
  Metrics();
  // `series` is a family's name, optionally with labels: requests_total{status="200"}.
  void add(const std::string& series, double value = 1);  // counters
  void set(const std::string& series, double value);      // gauges
  void observe(const std::string& family, double value);  // histograms
  double value(const std::string& series) const;          // a counter's or gauge's value (0 if never set)
  std::string render() const;

 private:
  struct Family {
    std::string type, help;
    std::vector<double> bounds;  // histograms: bucket upper bounds
  };
  struct Histogram {
    std::vector<double> counts;  // per bound, not cumulative
    double sum = 0, count = 0;
  };
  static std::string family_of(const std::string& series);
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::map<std::string, double> values_;
  std::map<std::string, Histogram> histograms_;
};

}  // namespace onyx::serve

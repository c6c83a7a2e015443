#include "fleet/sidecar/exposition.h"

#include <atomic>
#include <charconv>
#include <cmath>

#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

namespace fleet::sidecar {
namespace {

void AppendDouble(double v, std::string* out) {
  if (std::isnan(v)) {
    *out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    *out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);   // shortest round-trip form
  out->append(buffer, static_cast<size_t>(end - buffer));
}

void AppendUint(uint64_t v, std::string* out) {
  char buffer[24];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  out->append(buffer, static_cast<size_t>(end - buffer));
}

// A label value or HELP text: backslash, newline (and, in label values, the double quote) escaped.
void AppendEscaped(const std::string& text, bool quote, std::string* out) {
  if (text.find_first_of(quote ? "\\\n\"" : "\\\n") == std::string::npos) {
    *out += text;  // the common case: nothing to escape
    return;
  }
  for (char c : text) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '\n') {
      *out += "\\n";
    } else if (quote && c == '"') {
      *out += "\\\"";
    } else {
      *out += c;
    }
  }
}

// name{labels[,extra="value"]} value [timestamp]
void AppendSample(const std::string& name, const char* suffix, const prometheus::ClientMetric& m,
                  const char* extra_name, double extra_value, bool has_extra, double value, std::string* out) {
  *out += name;
  *out += suffix;
  if (!m.label.empty() || has_extra) {
    *out += '{';
    bool first = true;
    for (const auto& label : m.label) {
      if (!first) *out += ',';
      first = false;
      *out += label.name;
      *out += "=\"";
      AppendEscaped(label.value, true, out);
      *out += '"';
    }
    if (has_extra) {
      if (!first) *out += ',';
      *out += extra_name;
      *out += "=\"";
      AppendDouble(extra_value, out);
      *out += '"';
    }
    *out += '}';
  }
  *out += ' ';
  AppendDouble(value, out);
  if (m.timestamp_ms != 0) {
    *out += ' ';
    AppendUint(static_cast<uint64_t>(m.timestamp_ms), out);
  }
  *out += '\n';
}

const char* TypeName(prometheus::MetricType type) {
  switch (type) {
    case prometheus::MetricType::Counter: return "counter";
    case prometheus::MetricType::Gauge: return "gauge";
    case prometheus::MetricType::Summary: return "summary";
    case prometheus::MetricType::Histogram: return "histogram";
    case prometheus::MetricType::Untyped: return "untyped";
  }
  return "untyped";
}

}  // namespace

void AppendExposition(const std::vector<prometheus::MetricFamily>& families, std::string* out) {
  for (const prometheus::MetricFamily& family : families) {
    if (family.metric.empty()) continue;
    *out += "# HELP ";
    *out += family.name;
    *out += ' ';
    AppendEscaped(family.help, false, out);
    *out += "\n# TYPE ";
    *out += family.name;
    *out += ' ';
    *out += TypeName(family.type);
    *out += '\n';
    for (const prometheus::ClientMetric& m : family.metric) {
      switch (family.type) {
        case prometheus::MetricType::Counter:
          AppendSample(family.name, "", m, nullptr, 0, false, m.counter.value, out);
          break;
        case prometheus::MetricType::Gauge:
          AppendSample(family.name, "", m, nullptr, 0, false, m.gauge.value, out);
          break;
        case prometheus::MetricType::Untyped:
          AppendSample(family.name, "", m, nullptr, 0, false, m.untyped.value, out);
          break;
        case prometheus::MetricType::Summary:
          for (const auto& q : m.summary.quantile) {
            AppendSample(family.name, "", m, "quantile", q.quantile, true, q.value, out);
          }
          AppendSample(family.name, "_sum", m, nullptr, 0, false, m.summary.sample_sum, out);
          AppendSample(family.name, "_count", m, nullptr, 0, false, static_cast<double>(m.summary.sample_count), out);
          break;
        case prometheus::MetricType::Histogram:
          for (const auto& b : m.histogram.bucket) {
            AppendSample(family.name, "_bucket", m, "le", b.upper_bound, true, static_cast<double>(b.cumulative_count),
                         out);
          }
          AppendSample(family.name, "_sum", m, nullptr, 0, false, m.histogram.sample_sum, out);
          AppendSample(family.name, "_count", m, nullptr, 0, false, static_cast<double>(m.histogram.sample_count), out);
          break;
      }
    }
  }
}

httpd::Route ExpositionRoute(std::shared_ptr<prometheus::Registry> registry, std::function<void(std::string*)> more,
                             std::string path) {
  auto last_size = std::make_shared<std::atomic<size_t>>(16 * 1024);
  return {std::move(path), {}, [registry = std::move(registry), more = std::move(more), last_size](const httpd::Request&) {
            httpd::Response response{200, "text/plain; version=0.0.4; charset=utf-8", std::string()};
            response.body.reserve(last_size->load() + last_size->load() / 8);   // one allocation
            AppendExposition(registry->Collect(), &response.body);
            if (more) more(&response.body);
            last_size->store(response.body.size());
            return response;
          }};
}

}  // namespace fleet::sidecar

// The Prometheus text exposition format (0.0.4), written straight into one string with
// std::to_chars. prometheus-cpp's TextSerializer goes through std::ostream, which costs more than
// the rest of a scrape: for a pod with 64 ranks (~1,800 series) it alone took ~2 ms a scrape.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fleet/httpd/http_server.h"

namespace prometheus {
class Registry;
struct MetricFamily;
}  // namespace prometheus

namespace fleet::sidecar {

// Appends the families to `out` (HELP, TYPE, then one line per sample; histograms as _bucket with
// a cumulative le label, _sum and _count).
void AppendExposition(const std::vector<prometheus::MetricFamily>& families, std::string* out);

// GET `path`: the registry in the text format, then what `more` appends (more families).
httpd::Route ExpositionRoute(std::shared_ptr<prometheus::Registry> registry,
                             std::function<void(std::string*)> more = nullptr, std::string path = "/metrics");

}  // namespace fleet::sidecar

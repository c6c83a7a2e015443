// Kubernetes object names are DNS names (RFC 1123): checked before they reach the API server, so
// that a bad name is refused with a message that says what a name may be.
#pragma once

#include <cstddef>
#include <string_view>

namespace fleet {

// A DNS label: 1 to `max_size` (at most 63) of a-z, 0-9 and '-', starting and ending with a
// letter or digit. Namespaces, Services and names that get suffixes (a job's pods) are labels; a
// smaller `max_size` leaves room for the suffix.
bool IsDnsLabel(std::string_view name, size_t max_size = 63);

// A DNS subdomain: dot-separated DNS labels, at most 253 characters. Most object names (pods,
// ConfigMaps) are subdomains.
bool IsDnsSubdomain(std::string_view name);

}  // namespace fleet

// Internal to fleet::kube: the cluster config's TLS material, shared by both HTTP transports, which
// hand it to their TLS libraries: OpenSSL for cpprestsdk (rest_client.cc), mbedTLS for the lite
// client (lite_tls.h). No TLS library here, so that fleet::kube_core links none.
#pragma once

#include <string>

#include "fleet/kube/config.h"
#include "fleet/kube/status.h"

namespace fleet::kube::internal {

// PEM text; empty when not configured.
struct TlsMaterial {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
};

// The CA, client certificate and key of `config`, from their *_data or read from their files:
// kConfig when a file cannot be read or only one of certificate and key is given.
StatusOr<TlsMaterial> LoadTlsMaterial(const ClusterConfig& config);

}  // namespace fleet::kube::internal

// Internal to fleet::kube: the cluster config's TLS material, shared by both HTTP transports
// (cpprestsdk and Boost.Beast both configure a boost::asio::ssl::context).
#pragma once

#include <memory>
#include <string>

#include <boost/system/error_code.hpp>

#include "fleet/kube/config.h"
#include "fleet/kube/status.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

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

// Trusts exactly the configured CA (as client-go does; the system's CAs when there is none) and
// presents the client certificate.
boost::system::error_code ApplyTls(const TlsMaterial& tls, boost::asio::ssl::context& ctx);

// A TLS client context with `tls` applied; kConfig when the PEM material is invalid, so that a bad
// file is a config error, not a failed handshake.
StatusOr<std::shared_ptr<boost::asio::ssl::context>> NewTlsContext(const TlsMaterial& tls);

}  // namespace fleet::kube::internal

#include "tls.h"

#include <openssl/ssl.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <boost/asio/ssl/context.hpp>

namespace fleet::kube::internal {
namespace {

StatusOr<std::string> DataOrFile(const std::string& data, const std::string& file, const char* what) {
  if (!data.empty() || file.empty()) return data;
  std::ifstream in(file, std::ios::binary);
  if (!in) return ApiStatus(Code::kConfig, std::string(what) + " " + file + ": " + std::strerror(errno));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

StatusOr<TlsMaterial> LoadTlsMaterial(const ClusterConfig& config) {
  auto ca = DataOrFile(config.ca_data, config.ca_file, "CA file");
  if (!ca.ok()) return ca.status();
  auto cert = DataOrFile(config.client_cert_data, config.client_cert_file, "client certificate file");
  if (!cert.ok()) return cert.status();
  auto key = DataOrFile(config.client_key_data, config.client_key_file, "client key file");
  if (!key.ok()) return key.status();
  if (cert->empty() != key->empty()) {
    return ApiStatus(Code::kConfig, "a client certificate needs a client key and vice versa");
  }
  return TlsMaterial{std::move(*ca), std::move(*cert), std::move(*key)};
}

boost::system::error_code ApplyTls(const TlsMaterial& tls, boost::asio::ssl::context& ctx) {
  boost::system::error_code ec;
  if (tls.ca_pem.empty()) {
    // Only without a CA: this parses the system's bundle into the store, which a CA replaces.
    ctx.set_default_verify_paths(ec);
    if (ec) return ec;
  } else {
    SSL_CTX_set_cert_store(ctx.native_handle(), X509_STORE_new());
    ctx.add_certificate_authority(boost::asio::buffer(tls.ca_pem), ec);
    if (ec) return ec;
  }
  if (!tls.cert_pem.empty()) {
    ctx.use_certificate_chain(boost::asio::buffer(tls.cert_pem), ec);
    if (ec) return ec;
    ctx.use_private_key(boost::asio::buffer(tls.key_pem), boost::asio::ssl::context::pem, ec);
    if (ec) return ec;
  }
  return ec;
}

StatusOr<std::shared_ptr<boost::asio::ssl::context>> NewTlsContext(const TlsMaterial& tls) {
  auto ctx = std::make_shared<boost::asio::ssl::context>(boost::asio::ssl::context::tls_client);
  if (boost::system::error_code ec = ApplyTls(tls, *ctx)) {
    return ApiStatus(Code::kConfig, "TLS material (CA, client certificate or key) is invalid: " + ec.message());
  }
  return ctx;
}

}  // namespace fleet::kube::internal

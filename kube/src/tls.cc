#include "tls.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

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

}  // namespace fleet::kube::internal

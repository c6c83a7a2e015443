// Internal to fleet::kube_lite: TLS for the lite client on mbedTLS, whose pages in a process are a
// fifth of OpenSSL 3's (docs/sidecar.md, "footprint"). mbedTLS stays behind this header.
//
// Verification is what the cpprestsdk client does with OpenSSL: the chain against the cluster CA
// (the system's CAs when there is none), and the server's name: a host name against the
// certificate's DNS names (its CN when it has no subjectAltName), an IP address against its IP
// address SANs only. mbedTLS 2.28 matches names only: given an IP address as the name it never
// looks at the IP SANs (so it rejects an in-cluster server's certificate), and it accepts a
// certificate whose CN is that string. So for an IP address the session gives mbedTLS no name and
// compares the IP SANs it parsed (x509_crt::subject_alt_names) with the address itself.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include "fleet/kube/status.h"
#include "tls.h"

namespace fleet::kube::internal {

// mbedTLS's error codes (negative ints) as error codes; message() is mbedtls_strerror's.
const boost::system::error_category& MbedTlsCategory();

// What the client side of every connection shares: trust anchors, client certificate and key, the
// random generator. Immutable once made, so connections on any thread may use it.
class TlsConfig;

// kConfig when the PEM material is invalid (or the key is not the certificate's), so that a bad
// file is a config error, not a failed handshake. `verify` false: no verification at all
// (insecure-skip-tls-verify).
StatusOr<std::shared_ptr<const TlsConfig>> NewTlsConfig(const TlsMaterial& tls, bool verify);

// One TLS session over a connected socket in non-blocking mode, which it reads and writes itself.
// Each call goes as far as it can without blocking; when the socket would block, it returns with
// *wait saying for what, and the caller waits for the socket (its deadline, its cancel token) and
// calls again with the same arguments. Not thread-safe; the socket must outlive it.
class TlsSession {
 public:
  enum class Wait { kNone, kReadable, kWritable };

  // `host`: the server URL's host (a name, or an IP address without brackets). Throws
  // std::runtime_error when mbedTLS cannot set the session up (memory, a name too long).
  TlsSession(std::shared_ptr<const TlsConfig> config, boost::asio::ip::tcp::socket& socket, const std::string& host);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  boost::system::error_code Handshake(Wait* wait);
  // Why the last handshake's verification failed (mbedTLS's words), or "".
  std::string VerifyFailure() const;
  // asio::error::eof when the server closed the session (close_notify); the connection closed
  // without one is MBEDTLS_ERR_SSL_CONN_EOF: possibly truncated, as OpenSSL's stream_truncated.
  size_t Read(void* data, size_t size, boost::system::error_code& ec, Wait* wait);
  size_t Write(const void* data, size_t size, boost::system::error_code& ec, Wait* wait);

 private:
  struct State;
  const std::unique_ptr<State> state_;
};

}  // namespace fleet::kube::internal

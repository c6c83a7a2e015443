#include "lite_tls.h"

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include <boost/asio/error.hpp>
#include <boost/asio/ip/address.hpp>

namespace fleet::kube::internal {
namespace {

// Boost's error_category has a protected non-virtual destructor by design (categories are
// singletons, never deleted through it), which -Wnon-virtual-dtor flags in every derived class.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"
class MbedTlsErrors final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "mbedtls"; }
  std::string message(int code) const override {
    char text[200];
    mbedtls_strerror(code, text, sizeof text);
    return text;
  }
};
#pragma GCC diagnostic pop

// Where OpenSSL's set_default_verify_paths finds the system's CAs on Debian (the cpprestsdk
// client's trust when no CA is configured), SSL_CERT_FILE included.
const char* SystemCaFile() {
  const char* file = std::getenv("SSL_CERT_FILE");
  return file != nullptr && *file != '\0' ? file : "/etc/ssl/certs/ca-certificates.crt";
}

// mbedTLS parses PEM only with the terminating NUL counted in the length.
const unsigned char* Pem(const std::string& pem) { return reinterpret_cast<const unsigned char*>(pem.c_str()); }

}  // namespace

const boost::system::error_category& MbedTlsCategory() {
  static const MbedTlsErrors category;
  return category;
}

class TlsConfig {
 public:
  TlsConfig() {
    mbedtls_entropy_init(&entropy_);
    mbedtls_ctr_drbg_init(&random_);
    mbedtls_x509_crt_init(&ca_);
    mbedtls_x509_crt_init(&cert_);
    mbedtls_pk_init(&key_);
    mbedtls_ssl_config_init(&ssl_);
  }
  ~TlsConfig() {
    mbedtls_ssl_config_free(&ssl_);
    mbedtls_pk_free(&key_);
    mbedtls_x509_crt_free(&cert_);
    mbedtls_x509_crt_free(&ca_);
    mbedtls_ctr_drbg_free(&random_);
    mbedtls_entropy_free(&entropy_);
  }
  TlsConfig(const TlsConfig&) = delete;
  TlsConfig& operator=(const TlsConfig&) = delete;

  // An error message, or "".
  std::string Init(const TlsMaterial& tls, bool verify) {
    auto failed = [](const char* what, int code) { return std::string(what) + ": " + MbedTlsCategory().message(code); };
    static const char kPersonalization[] = "fleet::kube_lite";
    int rc = mbedtls_ctr_drbg_seed(&random_, mbedtls_entropy_func, &entropy_,
                                   reinterpret_cast<const unsigned char*>(kPersonalization), sizeof kPersonalization);
    if (rc != 0) return failed("seeding the random generator", rc);
    rc = mbedtls_ssl_config_defaults(&ssl_, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                     MBEDTLS_SSL_PRESET_DEFAULT);
    if (rc != 0) return failed("TLS defaults", rc);
    mbedtls_ssl_conf_rng(&ssl_, mbedtls_ctr_drbg_random, &random_);  // locks its own mutex (MBEDTLS_THREADING_C)
    mbedtls_ssl_conf_authmode(&ssl_, verify ? MBEDTLS_SSL_VERIFY_REQUIRED : MBEDTLS_SSL_VERIFY_NONE);
    if (tls.ca_pem.empty()) {
      // Like OpenSSL's default paths: a missing or partly unreadable bundle is no config error; with
      // no CA at all every handshake fails verification.
      mbedtls_x509_crt_parse_file(&ca_, SystemCaFile());
    } else if ((rc = mbedtls_x509_crt_parse(&ca_, Pem(tls.ca_pem), tls.ca_pem.size() + 1)) != 0) {
      // > 0: that many certificates of the bundle failed; the configured CA must be all valid.
      return rc > 0 ? "the CA has invalid certificates" : failed("the CA", rc);
    }
    mbedtls_ssl_conf_ca_chain(&ssl_, &ca_, nullptr);
    if (!tls.cert_pem.empty()) {
      if ((rc = mbedtls_x509_crt_parse(&cert_, Pem(tls.cert_pem), tls.cert_pem.size() + 1)) != 0) {
        return rc > 0 ? "the client certificate has invalid certificates" : failed("the client certificate", rc);
      }
      if ((rc = mbedtls_pk_parse_key(&key_, Pem(tls.key_pem), tls.key_pem.size() + 1, nullptr, 0)) != 0) {
        return failed("the client key", rc);
      }
      if ((rc = mbedtls_pk_check_pair(&cert_.pk, &key_)) != 0) return failed("the client key and certificate", rc);
      if ((rc = mbedtls_ssl_conf_own_cert(&ssl_, &cert_, &key_)) != 0) return failed("the client certificate", rc);
    }
    return "";
  }

  const mbedtls_ssl_config* ssl() const { return &ssl_; }

 private:
  mbedtls_entropy_context entropy_;
  mbedtls_ctr_drbg_context random_;
  mbedtls_x509_crt ca_;
  mbedtls_x509_crt cert_;
  mbedtls_pk_context key_;
  mbedtls_ssl_config ssl_;
};

StatusOr<std::shared_ptr<const TlsConfig>> NewTlsConfig(const TlsMaterial& tls, bool verify) {
  auto config = std::make_shared<TlsConfig>();
  if (std::string error = config->Init(tls, verify); !error.empty()) {
    return ApiStatus(Code::kConfig, "TLS material (CA, client certificate or key) is invalid: " + error);
  }
  return std::shared_ptr<const TlsConfig>(std::move(config));
}

struct TlsSession::State {
  State() { mbedtls_ssl_init(&ssl); }
  ~State() { mbedtls_ssl_free(&ssl); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  std::shared_ptr<const TlsConfig> config;
  boost::asio::ip::tcp::socket* socket;
  std::vector<unsigned char> ip;  // the server's address, network order, when it is addressed by one
  mbedtls_ssl_context ssl;

  // mbedTLS's I/O callbacks, on the non-blocking socket (asio sends with MSG_NOSIGNAL: a closed
  // peer is an error, not a SIGPIPE).
  static int Send(void* self, const unsigned char* data, size_t size) {
    boost::system::error_code ec;
    const size_t sent = static_cast<State*>(self)->socket->write_some(boost::asio::buffer(data, size), ec);
    if (ec == boost::asio::error::would_block) return MBEDTLS_ERR_SSL_WANT_WRITE;
    if (ec == boost::asio::error::connection_reset) return MBEDTLS_ERR_NET_CONN_RESET;
    if (ec) return MBEDTLS_ERR_NET_SEND_FAILED;
    return static_cast<int>(sent);
  }
  static int Receive(void* self, unsigned char* data, size_t size) {
    boost::system::error_code ec;
    const size_t got = static_cast<State*>(self)->socket->read_some(boost::asio::buffer(data, size), ec);
    if (ec == boost::asio::error::would_block) return MBEDTLS_ERR_SSL_WANT_READ;
    if (ec == boost::asio::error::eof) return 0;  // mbedTLS: the connection closed
    if (ec == boost::asio::error::connection_reset) return MBEDTLS_ERR_NET_CONN_RESET;
    if (ec) return MBEDTLS_ERR_NET_RECV_FAILED;
    return static_cast<int>(got);
  }

  // The verify callback, for every certificate of the chain (depth 0: the server's own): the
  // server's IP address must be one of its IP address SANs, which mbedTLS lists raw (4 or 16
  // octets, network order) with the other SANs. Marking the mismatch fails the handshake as a name
  // mismatch would.
  static int VerifyIp(void* self, mbedtls_x509_crt* certificate, int depth, uint32_t* flags) {
    if (depth != 0) return 0;
    const std::vector<unsigned char>& ip = static_cast<State*>(self)->ip;
    for (const mbedtls_x509_sequence* san = &certificate->subject_alt_names; san != nullptr; san = san->next) {
      if (san->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_X509_SAN_IP_ADDRESS) && san->buf.len == ip.size() &&
          std::memcmp(san->buf.p, ip.data(), ip.size()) == 0) {
        return 0;
      }
    }
    *flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
    return 0;
  }
};

namespace {

// The result of one mbedTLS call: bytes, or what to wait for, or an error.
size_t Outcome(int rc, boost::system::error_code& ec, TlsSession::Wait* wait) {
  *wait = TlsSession::Wait::kNone;
  ec = {};
  if (rc >= 0) return static_cast<size_t>(rc);
  if (rc == MBEDTLS_ERR_SSL_WANT_READ) {
    *wait = TlsSession::Wait::kReadable;
  } else if (rc == MBEDTLS_ERR_SSL_WANT_WRITE) {
    *wait = TlsSession::Wait::kWritable;
  } else {
    ec = boost::system::error_code(rc, MbedTlsCategory());
  }
  return 0;
}

// mbedTLS takes int lengths' worth at most per call (it returns the count as an int).
size_t Clamp(size_t size) { return std::min<size_t>(size, std::numeric_limits<int>::max()); }

}  // namespace

TlsSession::TlsSession(std::shared_ptr<const TlsConfig> config, boost::asio::ip::tcp::socket& socket,
                       const std::string& host)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.config = std::move(config);
  s.socket = &socket;
  if (int rc = mbedtls_ssl_setup(&s.ssl, s.config->ssl()); rc != 0) {
    throw std::runtime_error(MbedTlsCategory().message(rc));  // out of memory
  }
  boost::system::error_code not_ip;
  const boost::asio::ip::address address = boost::asio::ip::make_address(host, not_ip);
  if (not_ip) {
    // The name mbedTLS checks the certificate against, and sends as SNI.
    if (int rc = mbedtls_ssl_set_hostname(&s.ssl, host.c_str()); rc != 0) {
      throw std::runtime_error(MbedTlsCategory().message(rc));  // out of memory, or longer than a DNS name
    }
  } else {
    // No name for mbedTLS (nor SNI, which takes no addresses): VerifyIp checks the address.
    if (address.is_v4()) {
      const auto bytes = address.to_v4().to_bytes();
      s.ip.assign(bytes.begin(), bytes.end());
    } else {
      const auto bytes = address.to_v6().to_bytes();
      s.ip.assign(bytes.begin(), bytes.end());
    }
    mbedtls_ssl_set_verify(&s.ssl, &State::VerifyIp, &s);
  }
  mbedtls_ssl_set_bio(&s.ssl, &s, &State::Send, &State::Receive, nullptr);
}

TlsSession::~TlsSession() = default;

boost::system::error_code TlsSession::Handshake(Wait* wait) {
  boost::system::error_code ec;
  Outcome(mbedtls_ssl_handshake(&state_->ssl), ec, wait);
  return ec;
}

std::string TlsSession::VerifyFailure() const {
  const uint32_t flags = mbedtls_ssl_get_verify_result(&state_->ssl);
  if (flags == 0 || flags == static_cast<uint32_t>(-1)) return "";  // none, or no verification done
  char text[512];
  if (mbedtls_x509_crt_verify_info(text, sizeof text, "", flags) < 0) return "";
  std::string failure = text;  // one line per reason
  while (!failure.empty() && failure.back() == '\n') failure.pop_back();
  for (char& c : failure) {
    if (c == '\n') c = ';';
  }
  return failure;
}

size_t TlsSession::Read(void* data, size_t size, boost::system::error_code& ec, Wait* wait) {
  const int rc = mbedtls_ssl_read(&state_->ssl, static_cast<unsigned char*>(data), Clamp(size));
  if (rc == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY || (rc == 0 && size > 0)) {
    *wait = Wait::kNone;
    ec = boost::asio::error::eof;
    return 0;
  }
  return Outcome(rc, ec, wait);
}

size_t TlsSession::Write(const void* data, size_t size, boost::system::error_code& ec, Wait* wait) {
  return Outcome(mbedtls_ssl_write(&state_->ssl, static_cast<const unsigned char*>(data), Clamp(size)), ec, wait);
}

}  // namespace fleet::kube::internal

// CreateLiteClient: the Kubernetes API (api_client.h) over Boost.Beast's HTTP/1.1 on Boost.Asio
// sockets, plain or OpenSSL-secured.
//
// Each connection has an io_context of its own, run by the thread that uses the connection, one
// operation at a time: the thread runs it until it completes, its deadline passes or the caller's
// CancelToken fires (looked at every kCancelPoll); the latter two close the socket, which ends
// the operation at once, and the connection with it. So there are no I/O threads, and a deadline
// or a cancellation never waits for the network.
//
// Connections that ended their last exchange cleanly with keep-alive go back to a small pool. One
// taken from there may have been closed by the server meanwhile: when it fails before any byte of
// the response, the request goes out again on another connection, as cpprestsdk's client does (a
// server closes idle connections between requests, so the request it met was never read).
#include "fleet/kube/lite_client.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "api_client.h"
#include "tls.h"

namespace fleet::kube {
namespace internal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;

constexpr uint32_t kHeaderLimit = 64 * 1024;  // room for long Warning headers; Beast's default is 8 KiB
constexpr size_t kMaxIdleConnections = 4;

// The server URL, split: scheme://host[:port][/base-path].
struct ServerUrl {
  bool https = false;
  std::string host;         // without the brackets of an IPv6 address
  std::string port;
  std::string authority;    // host[:port] as written: the Host header
  std::string base_path;    // "" or "/prefix", put before every request's path (API proxies)
};

StatusOr<ServerUrl> ParseServer(const std::string& server) {
  auto bad = [&server](const std::string& why) {
    return ApiStatus(Code::kConfig, "server " + server + ": " + why);
  };
  ServerUrl url;
  std::string_view rest = server;
  if (rest.rfind("https://", 0) == 0) {
    url.https = true;
    rest.remove_prefix(8);
  } else if (rest.rfind("http://", 0) == 0) {
    rest.remove_prefix(7);
  } else {
    return bad("not an http:// or https:// URL");
  }
  const size_t slash = rest.find('/');
  url.authority = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) url.base_path = std::string(rest.substr(slash));
  while (!url.base_path.empty() && url.base_path.back() == '/') url.base_path.pop_back();
  if (url.authority.find_first_of("@?#") != std::string::npos) return bad("user info, a query or a fragment");
  std::string_view port;
  if (!url.authority.empty() && url.authority[0] == '[') {
    const size_t close = url.authority.find(']');
    if (close == std::string::npos) return bad("an unterminated IPv6 address");
    url.host = url.authority.substr(1, close - 1);
    const std::string_view after = std::string_view(url.authority).substr(close + 1);
    if (!after.empty() && after[0] != ':') return bad("junk after the IPv6 address");
    if (!after.empty()) port = after.substr(1);
  } else {
    const size_t colon = url.authority.rfind(':');
    url.host = url.authority.substr(0, colon);
    if (colon != std::string::npos) port = std::string_view(url.authority).substr(colon + 1);
  }
  if (url.host.empty()) return bad("no host");
  if (port.empty()) {
    url.port = url.https ? "443" : "80";
    return url;
  }
  const bool digits = port.size() <= 5 && port.find_first_not_of("0123456789") == std::string_view::npos;
  const int number = digits ? std::stoi(std::string(port)) : 0;
  if (number < 1 || number > 65535) return bad("the port is not a number from 1 to 65535");
  url.port = std::string(port);
  return url;
}

std::string_view View(beast::string_view s) { return {s.data(), s.size()}; }

bool IsIpAddress(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

// One connection to the API server, plain or TLS (see the top of the file). Used by one thread
// at a time; Connect once, then Exchange and ReadBody for each request.
class Connection {
 public:
  Connection(ServerUrl server, std::shared_ptr<asio::ssl::context> tls, bool verify)
      : server_(std::move(server)), tls_context_(std::move(tls)), verify_(verify), io_(1), socket_(io_) {}

  // Connects and, for https, shakes hands: the certificate chain is checked against the context's
  // CA and the certificate's names against the URL's host, unless insecure.
  ApiStatus Connect(Clock::time_point deadline, const CancelToken* cancel) {
    const std::string where = server_.host + ":" + server_.port;
    tcp::resolver resolver(io_);
    beast::error_code ec;
    const tcp::resolver::results_type endpoints = resolver.resolve(server_.host, server_.port, ec);
    if (ec) return Failure("resolving " + where, ec);
    ec = Run([&](auto handler) { asio::async_connect(socket_, endpoints, std::move(handler)); }, deadline, cancel);
    if (ec) return Failure("connecting to " + where, ec);
    socket_.set_option(tcp::no_delay(true), ec);  // requests are small: do not wait to fill a segment
    if (!tls_context_) return ApiStatus();
    tls_.emplace(socket_, *tls_context_);
    if (!IsIpAddress(server_.host)) SSL_set_tlsext_host_name(tls_->native_handle(), server_.host.c_str());
    if (verify_) {
      tls_->set_verify_mode(asio::ssl::verify_peer);
      tls_->set_verify_callback(asio::ssl::host_name_verification(server_.host));
    } else {
      tls_->set_verify_mode(asio::ssl::verify_none);
    }
    ec = Run([&](auto handler) { tls_->async_handshake(asio::ssl::stream_base::client, std::move(handler)); },
             deadline, cancel);
    if (ec) return Failure("TLS handshake with " + where, ec);
    return ApiStatus();
  }

  // Sends `request` and reads the head of the response.
  ApiStatus Exchange(const http::request<http::string_body>& request, Clock::time_point deadline,
                     const CancelToken* cancel) {
    parser_.emplace();
    // Bodies are capped above the transport, as they are read. (Not boost::none: Boost 1.74 compares
    // a Content-Length with that as greater, and refuses every body.)
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    parser_->header_limit(kHeaderLimit);
    beast::error_code ec = WithStream([&](auto& stream) {
      return Run([&](auto handler) { http::async_write(stream, request, std::move(handler)); }, deadline, cancel);
    });
    if (ec) return Failure("sending the request", ec);
    ec = WithStream([&](auto& stream) {
      return Run([&](auto handler) { http::async_read_header(stream, buffer_, *parser_, std::move(handler)); },
                 deadline, cancel);
    });
    if (ec) return Failure("waiting for the response", ec);
    return ApiStatus();
  }

  HttpHead Head() const {
    const auto& message = parser_->get();
    HttpHead head;
    head.status = static_cast<int>(message.result_int());
    head.content_type = std::string(View(message[http::field::content_type]));
    if (auto length = parser_->content_length()) head.content_length = *length;
    head.retry_after = ParseRetryAfter(View(message[http::field::retry_after]));
    return head;
  }

  // HttpStream::Read of the response whose head Exchange read.
  ApiStatus ReadBody(std::string* out, size_t max_bytes, Clock::time_point deadline, const CancelToken* cancel,
                     bool* eof) {
    const size_t want = std::min(max_bytes, kReadChunk);
    const size_t old = out->size();
    out->resize(old + want);
    size_t got = 0;
    beast::error_code ec;
    // A read may only take in framing (a chunk header): go on until there is body, or its end.
    while (got == 0 && !parser_->is_done()) {
      auto& body = parser_->get().body();
      body.data = &(*out)[old];
      body.size = want;
      ec = WithStream([&](auto& stream) {
        return Run([&](auto handler) { http::async_read_some(stream, buffer_, *parser_, std::move(handler)); },
                   deadline, cancel);
      });
      got = want - body.size;
      if (ec == http::error::need_buffer) ec = {};  // the chunk filled `out`: not an error
      if (ec) break;
    }
    out->resize(old + got);
    if (ec) return Failure("reading the response body", ec);
    *eof = parser_->is_done();
    return ApiStatus();
  }

  // Whether another request may use this connection: the last response was read to its end, and
  // both sides keep the connection alive.
  bool Reusable() const { return !broken_ && parser_ && parser_->is_done() && parser_->keep_alive(); }

  // Whether the last exchange failed on its own (no deadline, no cancel) before any byte of the
  // response arrived: what a kept-alive connection the server has closed looks like.
  bool FailedUnanswered() const { return broken_ && stopped_ == Stop::kNo && parser_ && !parser_->got_some(); }

 private:
  enum class Stop { kNo, kDeadline, kCancelled };

  template <typename F>
  beast::error_code WithStream(F&& f) {
    return tls_ ? f(*tls_) : f(socket_);
  }

  // Runs the asynchronous operation `start` begins until it completes, `deadline` passes or
  // `cancel` fires. For the latter two the socket is closed, which completes the operation at once
  // (operation_aborted); the connection is of no further use.
  template <typename Start>
  beast::error_code Run(Start&& start, Clock::time_point deadline, const CancelToken* cancel) {
    bool done = false;
    beast::error_code result;
    start([&done, &result](beast::error_code ec, auto&&...) {
      result = ec;
      done = true;
    });
    io_.restart();
    while (!done) {
      const Clock::time_point now = Clock::now();
      const bool cancelled = cancel && cancel->cancelled();
      if (cancelled || now >= deadline) {
        stopped_ = cancelled ? Stop::kCancelled : Stop::kDeadline;
        beast::error_code ignored;
        socket_.close(ignored);
        while (!done && io_.run_one() > 0) {
        }
        // Even when it had just succeeded: the socket is closed now.
        return asio::error::operation_aborted;
      }
      io_.run_one_until(cancel ? std::min(deadline, now + kCancelPoll) : deadline);
    }
    return result;
  }

  ApiStatus Failure(const std::string& doing, const beast::error_code& ec) {
    broken_ = true;
    if (stopped_ == Stop::kCancelled) return ApiStatus(Code::kCancelled, "cancelled");
    if (stopped_ == Stop::kDeadline) return ApiStatus(Code::kUnavailable, "timed out " + doing);
    return ApiStatus(Code::kUnavailable, doing + ": " + ec.message());
  }

  const ServerUrl server_;
  const std::shared_ptr<asio::ssl::context> tls_context_;  // null for http://
  const bool verify_;
  asio::io_context io_;
  tcp::socket socket_;
  std::optional<asio::ssl::stream<tcp::socket&>> tls_;  // over socket_, for https://
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;  // the current exchange's
  bool broken_ = false;
  Stop stopped_ = Stop::kNo;
};

class ConnectionPool {
 public:
  std::unique_ptr<Connection> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.empty()) return nullptr;
    std::unique_ptr<Connection> connection = std::move(idle_.back());
    idle_.pop_back();
    return connection;
  }

  void Put(std::unique_ptr<Connection> connection) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(connection));
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

// A response being read; its connection goes back to the pool when it was read to the end.
class LiteStream final : public HttpStream {
 public:
  LiteStream(std::unique_ptr<Connection> connection, std::shared_ptr<ConnectionPool> pool, milliseconds idle)
      : connection_(std::move(connection)), pool_(std::move(pool)), idle_(idle) {
    head_ = connection_->Head();
  }
  ~LiteStream() override {
    if (connection_->Reusable()) pool_->Put(std::move(connection_));
  }

  ApiStatus Read(std::string* out, size_t max_bytes, Clock::time_point deadline, const CancelToken* cancel,
                 bool* eof) override {
    *eof = false;
    return connection_->ReadBody(out, max_bytes, std::min(deadline, Clock::now() + idle_), cancel, eof);
  }

 private:
  std::unique_ptr<Connection> connection_;
  const std::shared_ptr<ConnectionPool> pool_;
  const milliseconds idle_;
};

class LiteTransport final : public HttpTransport {
 public:
  LiteTransport(ServerUrl server, ClientOptions options, std::shared_ptr<asio::ssl::context> tls, bool verify)
      : server_(std::move(server)), options_(std::move(options)), tls_(std::move(tls)), verify_(verify) {}

  StatusOr<HttpReply> RoundTrip(const HttpRequest& request, const std::string& token) override {
    const Clock::time_point deadline = Clock::now() + options_.request_timeout;
    auto stream = Open(request, token, deadline, nullptr, options_.request_timeout);
    if (!stream.ok()) return stream.status();
    HttpReply reply;
    reply.head = (*stream)->head();
    auto body = ReadAll(**stream, Describe(request), options_.max_response_bytes, deadline,
                                  nullptr);
    if (!body.ok()) return body.status();
    reply.body = std::move(*body);
    return reply;
  }

  StatusOr<std::unique_ptr<HttpStream>> Open(const HttpRequest& request, const std::string& token,
                                             Clock::time_point deadline, const CancelToken* cancel,
                                             milliseconds idle) override {
    const std::string what = Describe(request);
    try {
      const http::request<http::string_body> message = BuildRequest(request, token);
      while (true) {
        std::unique_ptr<Connection> connection = pool_->Take();
        const bool reused = connection != nullptr;
        if (!reused) {
          connection = std::make_unique<Connection>(server_, tls_, verify_);
          if (ApiStatus s = connection->Connect(deadline, cancel); !s.ok()) return Prefixed(what, s);
        }
        ApiStatus sent = connection->Exchange(message, deadline, cancel);
        if (sent.ok()) return std::unique_ptr<HttpStream>(std::make_unique<LiteStream>(std::move(connection), pool_, idle));
        if (reused && connection->FailedUnanswered()) continue;  // closed while idle (see the top)
        return Prefixed(what, sent);
      }
    } catch (const std::exception& e) {  // allocation, or OpenSSL failing to make a session
      return ApiStatus(Code::kUnavailable, what + ": " + e.what());
    }
  }

 private:
  static ApiStatus Prefixed(const std::string& what, const ApiStatus& status) {
    return ApiStatus(status.code(), what + ": " + status.message());
  }

  http::request<http::string_body> BuildRequest(const HttpRequest& request, const std::string& token) const {
    http::request<http::string_body> message;
    message.method_string(request.method);
    message.target(server_.base_path + request.target);
    message.version(11);
    message.set(http::field::host, server_.authority);
    message.set(http::field::user_agent, options_.user_agent);
    message.set(http::field::accept, "application/json");
    if (!token.empty()) message.set(http::field::authorization, "Bearer " + token);
    if (request.body) {
      message.set(http::field::content_type, request.content_type);
      message.body() = *request.body;
    }
    message.prepare_payload();
    return message;
  }

  const ServerUrl server_;
  const ClientOptions options_;
  const std::shared_ptr<asio::ssl::context> tls_;  // null for http://
  const bool verify_;
  const std::shared_ptr<ConnectionPool> pool_ = std::make_shared<ConnectionPool>();
};

}  // namespace
}  // namespace internal

StatusOr<std::shared_ptr<Client>> CreateLiteClient(const ClusterConfig& config, const ClientOptions& options) {
  if (ApiStatus s = internal::CheckClientSetup(config, options); !s.ok()) return s;
  auto tls = internal::LoadTlsMaterial(config);
  if (!tls.ok()) return tls.status();
  auto server = internal::ParseServer(config.server);
  if (!server.ok()) return server.status();
  std::shared_ptr<boost::asio::ssl::context> context;
  if (server->https) {
    auto made = internal::NewTlsContext(*tls);
    if (!made.ok()) return made.status();
    context = std::move(*made);
  }
  auto transport = std::make_unique<internal::LiteTransport>(std::move(*server), options, std::move(context),
                                                             !config.insecure_skip_tls_verify);
  return internal::NewApiClient(config, options, std::move(transport));
}

}  // namespace fleet::kube

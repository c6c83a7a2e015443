// CreateLiteClient: the Kubernetes API (api_client.h) over Boost.Beast's HTTP/1.1 on Boost.Asio
// sockets, plain or secured with mbedTLS (lite_tls.h; not OpenSSL, for the footprint).
//
// Each connection has an io_context of its own, run by the thread that uses the connection, one
// wait at a time. Beast reads and writes synchronously through a Stream over the non-blocking
// socket, or over the TLS session on it; whenever the socket would block, the thread runs an
// asynchronous wait for it until it is ready, the operation's deadline passes or the caller's
// CancelToken fires (looked at every kCancelPoll); the latter two close the socket, which ends
// the operation at once, and the connection with it. So there are no I/O threads, and a deadline
// or a cancellation never waits for the network.
//
// Connections that ended their last exchange cleanly with keep-alive go back to a small pool. One
// taken from there may have been closed by the server meanwhile: when it fails before any byte of
// the response, the request goes out again on another connection, as cpprestsdk's client does (a
// server closes idle connections between requests, so the request it met was never read).
//
// PlainHttpClient::Create (plain_http.h) is this transport alone, over plain HTTP.
#include "fleet/kube/lite_client.h"
#include "fleet/kube/plain_http.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "api_client.h"
#include "lite_tls.h"
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
// What the read buffer may hold: a whole response head, and one read beyond it. Beast parses a
// chunk's header (size and extensions, without a limit of its own) only once all of it is in the
// buffer: a server sending one without end fails there (buffer_overflow), not at the memory's end.
constexpr size_t kReadBufferLimit = kHeaderLimit + kReadChunk;
constexpr size_t kMaxIdleConnections = 4;
constexpr size_t kTlsWriteChunk = 16 * 1024;  // a TLS record's most plaintext

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

// One connection to the API server, plain or TLS (see the top of the file). Used by one thread
// at a time; Connect once, then Exchange and ReadBody for each request.
class Connection {
 public:
  Connection(ServerUrl server, std::shared_ptr<const TlsConfig> tls)
      : server_(std::move(server)), tls_config_(std::move(tls)), io_(1), socket_(io_), stream_(*this) {}

  // Connects and, for https, shakes hands: the certificate chain is checked against the config's
  // CA and the certificate's names against the URL's host, unless insecure (lite_tls.h).
  ApiStatus Connect(Clock::time_point deadline, const CancelToken* cancel) {
    Begin(deadline, cancel);
    const std::string where = server_.host + ":" + server_.port;
    tcp::resolver resolver(io_);
    beast::error_code ec;
    const tcp::resolver::results_type endpoints = resolver.resolve(server_.host, server_.port, ec);
    if (ec) return Failure("resolving " + where, ec);
    ec = Run([&](auto handler) { asio::async_connect(socket_, endpoints, std::move(handler)); });
    if (ec) return Failure("connecting to " + where, ec);
    socket_.set_option(tcp::no_delay(true), ec);  // requests are small: do not wait to fill a segment
    // Reads and writes must come back instead of blocking, to wait under the deadline (Stream).
    if (socket_.non_blocking(true, ec)) return Failure("connecting to " + where, ec);
    if (!tls_config_) return ApiStatus();
    tls_.emplace(tls_config_, socket_, server_.host);
    UntilDone(
        [&](beast::error_code& step_ec, TlsSession::Wait* wait) {
          step_ec = tls_->Handshake(wait);
          return size_t{0};
        },
        ec);
    if (ec) {
      const std::string why = tls_->VerifyFailure();
      return Failure("TLS handshake with " + where + (why.empty() ? "" : " (" + why + ")"), ec);
    }
    return ApiStatus();
  }

  // Sends `request` and reads the head of the response.
  ApiStatus Exchange(const http::request<http::string_body>& request, Clock::time_point deadline,
                     const CancelToken* cancel) {
    Begin(deadline, cancel);
    parser_.emplace();
    // Bodies are capped above the transport, as they are read. (Not boost::none: Boost 1.74 compares
    // a Content-Length with that as greater, and refuses every body.)
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    parser_->header_limit(kHeaderLimit);
    beast::error_code ec;
    http::write(stream_, request, ec);
    if (ec) return Failure("sending the request", ec);
    http::read_header(stream_, buffer_, *parser_, ec);
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
    Begin(deadline, cancel);
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
      http::read_some(stream_, buffer_, *parser_, ec);
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

  // What Beast reads and writes (a SyncReadStream and SyncWriteStream): the socket, or the TLS
  // session over it, for the connection's current operation (Begin).
  class Stream {
   public:
    explicit Stream(Connection& connection) : connection_(connection) {}

    template <typename Buffers>
    size_t read_some(const Buffers& buffers, beast::error_code& ec) {
      return connection_.ReadSome(buffers, ec);
    }
    template <typename Buffers>
    size_t read_some(const Buffers& buffers) {
      return Throwing([&](beast::error_code& ec) { return read_some(buffers, ec); });
    }
    template <typename Buffers>
    size_t write_some(const Buffers& buffers, beast::error_code& ec) {
      return connection_.WriteSome(buffers, ec);
    }
    template <typename Buffers>
    size_t write_some(const Buffers& buffers) {
      return Throwing([&](beast::error_code& ec) { return write_some(buffers, ec); });
    }

   private:
    template <typename F>
    static size_t Throwing(F&& f) {
      beast::error_code ec;
      const size_t n = f(ec);
      if (ec) throw boost::system::system_error(ec);
      return n;
    }

    Connection& connection_;
  };

  void Begin(Clock::time_point deadline, const CancelToken* cancel) {
    deadline_ = deadline;
    cancel_ = cancel;
  }

  template <typename Buffers>
  size_t ReadSome(const Buffers& buffers, beast::error_code& ec) {
    if (!tls_) {
      return OnSocket([&](beast::error_code& io_ec) { return socket_.read_some(buffers, io_ec); },
                      TlsSession::Wait::kReadable, ec);
    }
    // One TLS record at a time comes out anyway: the first buffer with room is enough.
    for (const asio::mutable_buffer buffer : beast::buffers_range_ref(buffers)) {
      if (buffer.size() == 0) continue;
      return UntilDone(
          [&](beast::error_code& step_ec, TlsSession::Wait* wait) {
            return tls_->Read(buffer.data(), buffer.size(), step_ec, wait);
          },
          ec);
    }
    ec = {};
    return 0;
  }

  template <typename Buffers>
  size_t WriteSome(const Buffers& buffers, beast::error_code& ec) {
    if (!tls_) {
      return OnSocket([&](beast::error_code& io_ec) { return socket_.write_some(buffers, io_ec); },
                      TlsSession::Wait::kWritable, ec);
    }
    // Beast hands over a request as many small buffers (each header field): gathered, they go out
    // as one TLS record rather than one record each.
    unsigned char gathered[kTlsWriteChunk];
    const size_t size = asio::buffer_copy(asio::buffer(gathered), buffers);
    return UntilDone(
        [&](beast::error_code& step_ec, TlsSession::Wait* wait) { return tls_->Write(gathered, size, step_ec, wait); },
        ec);
  }

  // The plain socket's read_some or write_some (`io`) until done, as UntilDone runs a TLS
  // session's steps: would_block means waiting for `on_block`.
  template <typename Io>
  size_t OnSocket(Io&& io, TlsSession::Wait on_block, beast::error_code& ec) {
    return UntilDone(
        [&](beast::error_code& step_ec, TlsSession::Wait* wait) {
          const size_t n = io(step_ec);
          *wait = step_ec == asio::error::would_block ? on_block : TlsSession::Wait::kNone;
          if (step_ec == asio::error::would_block) step_ec = {};
          return n;
        },
        ec);
  }

  // Calls `step` (one non-blocking read, write or handshake step) until it neither fails nor has to
  // wait, waiting for the socket in between, under the current operation's deadline and cancel.
  // Those are looked at before every step too: from a server that sends faster than it is read,
  // every step has data, and none would ever wait.
  template <typename Step>
  size_t UntilDone(Step&& step, beast::error_code& ec) {
    while (true) {
      if (StopIfDue()) {
        ec = asio::error::operation_aborted;
        return 0;
      }
      TlsSession::Wait wait = TlsSession::Wait::kNone;
      const size_t n = step(ec, &wait);
      if (ec || wait == TlsSession::Wait::kNone) return n;
      const auto what = wait == TlsSession::Wait::kReadable ? tcp::socket::wait_read : tcp::socket::wait_write;
      ec = Run([&](auto handler) { socket_.async_wait(what, std::move(handler)); });
      if (ec) return 0;
    }
  }

  // Runs the asynchronous operation `start` begins until it completes, the deadline passes or the
  // cancel token fires. For the latter two the socket is closed, which completes the operation at
  // once (operation_aborted); the connection is of no further use.
  template <typename Start>
  beast::error_code Run(Start&& start) {
    bool done = false;
    beast::error_code result;
    start([&done, &result](beast::error_code ec, auto&&...) {
      result = ec;
      done = true;
    });
    io_.restart();
    while (!done) {
      if (StopIfDue()) {
        while (!done && io_.run_one() > 0) {
        }
        // Even when it had just succeeded: the socket is closed now.
        return asio::error::operation_aborted;
      }
      io_.run_one_until(cancel_ ? std::min(deadline_, Clock::now() + kCancelPoll) : deadline_);
    }
    return result;
  }

  // When the current operation's deadline has passed or its cancel token fired: closes the socket
  // (which ends a pending wait at once; the connection is of no further use) and says so.
  bool StopIfDue() {
    const bool cancelled = cancel_ && cancel_->cancelled();
    if (!cancelled && Clock::now() < deadline_) return false;
    stopped_ = cancelled ? Stop::kCancelled : Stop::kDeadline;
    beast::error_code ignored;
    socket_.close(ignored);
    return true;
  }

  ApiStatus Failure(const std::string& doing, const beast::error_code& ec) {
    broken_ = true;
    if (stopped_ == Stop::kCancelled) return ApiStatus(Code::kCancelled, "cancelled");
    if (stopped_ == Stop::kDeadline) return ApiStatus(Code::kUnavailable, "timed out " + doing);
    return ApiStatus(Code::kUnavailable, doing + ": " + ec.message());
  }

  const ServerUrl server_;
  const std::shared_ptr<const TlsConfig> tls_config_;  // null for http://
  asio::io_context io_;
  tcp::socket socket_;
  std::optional<TlsSession> tls_;  // over socket_, for https://
  Stream stream_;
  beast::flat_buffer buffer_{kReadBufferLimit};
  std::optional<http::response_parser<http::buffer_body>> parser_;  // the current exchange's
  Clock::time_point deadline_;  // the current operation's (Begin)
  const CancelToken* cancel_ = nullptr;
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
  LiteTransport(ServerUrl server, ClientOptions options, std::shared_ptr<const TlsConfig> tls)
      : server_(std::move(server)), options_(std::move(options)), tls_(std::move(tls)) {}

  StatusOr<HttpReply> RoundTrip(const HttpRequest& request, const std::string& token) override {
    return RoundTripBy(request, token, Clock::time_point::max());
  }

  // RoundTrip, done by `deadline` when that comes before request_timeout.
  StatusOr<HttpReply> RoundTripBy(const HttpRequest& request, const std::string& token, Clock::time_point deadline) {
    deadline = std::min(deadline, Clock::now() + options_.request_timeout);
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
          connection = std::make_unique<Connection>(server_, tls_);
          if (ApiStatus s = connection->Connect(deadline, cancel); !s.ok()) return Prefixed(what, s);
        }
        ApiStatus sent = connection->Exchange(message, deadline, cancel);
        if (sent.ok()) return std::unique_ptr<HttpStream>(std::make_unique<LiteStream>(std::move(connection), pool_, idle));
        if (reused && connection->FailedUnanswered()) continue;  // closed while idle (see the top)
        return Prefixed(what, sent);
      }
    } catch (const std::exception& e) {  // allocation, or mbedTLS failing to set a session up
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
  const std::shared_ptr<const TlsConfig> tls_;  // null for http://
  const std::shared_ptr<ConnectionPool> pool_ = std::make_shared<ConnectionPool>();
};

// PlainHttpClient: the transport alone.
class LitePlainHttpClient final : public PlainHttpClient {
 public:
  explicit LitePlainHttpClient(std::unique_ptr<LiteTransport> transport) : transport_(std::move(transport)) {}

  StatusOr<PlainHttpReply> PostJson(const std::string& path, const std::string& json_body,
                                    Deadline deadline) override {
    auto reply = transport_->RoundTripBy(HttpRequest("POST", path, json_body), /*token=*/"", deadline);
    if (!reply.ok()) return reply.status();
    return PlainHttpReply{reply->head.status, std::move(reply->body)};
  }

 private:
  const std::unique_ptr<LiteTransport> transport_;
};

}  // namespace
}  // namespace internal

StatusOr<std::unique_ptr<PlainHttpClient>> PlainHttpClient::Create(const std::string& server,
                                                                  const ClientOptions& options) {
  auto url = internal::ParseServer(server);
  if (!url.ok()) return url.status();
  if (url->https) return ApiStatus(Code::kConfig, "server " + server + " is not an http:// URL");
  return std::unique_ptr<PlainHttpClient>(std::make_unique<internal::LitePlainHttpClient>(
      std::make_unique<internal::LiteTransport>(std::move(*url), options, /*tls=*/nullptr)));
}

StatusOr<std::shared_ptr<Client>> CreateLiteClient(const ClusterConfig& config, const ClientOptions& options) {
  if (ApiStatus s = internal::CheckClientSetup(config, options); !s.ok()) return s;
  auto tls = internal::LoadTlsMaterial(config);
  if (!tls.ok()) return tls.status();
  auto server = internal::ParseServer(config.server);
  if (!server.ok()) return server.status();
  std::shared_ptr<const internal::TlsConfig> tls_config;
  if (server->https) {
    auto made = internal::NewTlsConfig(*tls, !config.insecure_skip_tls_verify);
    if (!made.ok()) return made.status();
    tls_config = std::move(*made);
  }
  auto transport = std::make_unique<internal::LiteTransport>(std::move(*server), options, std::move(tls_config));
  return internal::NewApiClient(config, options, std::move(transport));
}

}  // namespace fleet::kube

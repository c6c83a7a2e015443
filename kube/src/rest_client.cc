// Client::Create: the Kubernetes API (api_client.h) over cpprestsdk's http_client. cpprest and
// Boost exceptions stop here and come back as ApiStatus values.
//
// Waiting: pplx tasks are only waited on from the caller's own thread (never inside a
// continuation, which would hold a pool thread hostage). A continuation only observes the result
// (so that no task exception goes unobserved, which pplx punishes with std::terminate) and wakes
// the waiter, which can then also honour deadlines and CancelTokens.
//
// Bodies: cpprest pushes a body into a producer/consumer buffer as the socket delivers it, with no
// limit of its own. A request's body is capped by its Content-Length before it is read and by a
// progress handler while it downloads; a watch stream is drained as it comes, its lines capped
// above the transport. Cancelling the request (which closes its connection) stops a body that is
// too large, a deadline that passes and a caller who cancels.
#include <openssl/ssl.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include <boost/asio/ssl.hpp>
#include <cpprest/http_client.h>
#include <pplx/threadpool.h>

#include "api_client.h"
#include "tls.h"

namespace fleet::kube {
namespace internal {
namespace {

namespace http = web::http;
using std::chrono::milliseconds;

// Trusts exactly the configured CA (as client-go does; the system's CAs when there is none) and
// presents the client certificate.
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

// A TLS client context with `tls` applied; kConfig when the PEM material is invalid, so that a bad
// file is a config error, not a failed handshake.
StatusOr<std::shared_ptr<boost::asio::ssl::context>> NewTlsContext(const TlsMaterial& tls) {
  auto ctx = std::make_shared<boost::asio::ssl::context>(boost::asio::ssl::context::tls_client);
  if (boost::system::error_code ec = ApplyTls(tls, *ctx)) {
    return ApiStatus(Code::kConfig, "TLS material (CA, client certificate or key) is invalid: " + ec.message());
  }
  return ctx;
}

constexpr milliseconds kAbortGrace{2000};  // how long to wait for a cancelled request to wind down

// Waits (on this thread) for `task` until `deadline`, or until `cancel` fires. True when done.
template <typename T>
bool WaitForTask(const pplx::task<T>& task, Clock::time_point deadline, const CancelToken* cancel) {
  if (task.is_done()) return true;
  struct Signal {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto signal = std::make_shared<Signal>();
  task.then([signal](pplx::task<T> finished) {
    try {
      finished.wait();  // already complete: observes a failure without blocking
    } catch (...) {
    }
    std::lock_guard<std::mutex> lock(signal->mu);
    signal->done = true;
    signal->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(signal->mu);
  while (!signal->done) {
    if (cancel && cancel->cancelled()) return false;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    Clock::time_point until = deadline;
    if (cancel) until = std::min(until, now + kCancelPoll);
    signal->cv.wait_until(lock, until);
  }
  return true;
}

HttpHead HeadOf(const http::http_response& response) {
  HttpHead head;
  head.status = response.status_code();
  const http::http_headers& headers = response.headers();
  head.content_type = headers.content_type();
  if (headers.has("Content-Length")) head.content_length = headers.content_length();
  if (auto it = headers.find("Retry-After"); it != headers.end()) head.retry_after = ParseRetryAfter(it->second);
  return head;
}

// A watch's response: its body read incrementally, whatever has arrived, else blocking for the
// next byte. Owns the http_client it came from (whose timeout is the stream's idle timeout).
class RestStream final : public HttpStream {
 public:
  RestStream(std::unique_ptr<http::client::http_client> client, pplx::cancellation_token_source cts,
             http::http_response response)
      : client_(std::move(client)), cts_(std::move(cts)), response_(std::move(response)),
        buf_(response_.body().streambuf()) {
    head_ = HeadOf(response_);
  }
  ~RestStream() override {
    if (!eof_) cts_.cancel();  // closes the connection; the server may still be sending
  }

  ApiStatus Read(std::string* out, size_t max_bytes, Clock::time_point deadline, const CancelToken* cancel,
                 bool* eof) override {
    *eof = false;
    try {
      const size_t available = buf_.in_avail();
      if (available > 0) {
        const size_t want = std::min({available, max_bytes, kReadChunk});
        const size_t old = out->size();
        out->resize(old + want);
        auto task = buf_.getn(reinterpret_cast<uint8_t*>(&(*out)[old]), want);
        // `want` bytes are buffered, so the read completed synchronously; waiting is a formality
        // that keeps `out` valid for it in any case.
        const size_t got = task.get();
        out->resize(old + got);
        if (got == 0) *eof = eof_ = true;
        return ApiStatus();
      }
      auto next = buf_.bumpc();
      if (!WaitForTask(next, deadline, cancel)) {
        if (cancel && cancel->cancelled()) return ApiStatus(Code::kCancelled, "cancelled");
        return ApiStatus(Code::kUnavailable, "timed out reading the response body");
      }
      const auto c = next.get();
      if (c == Concurrency::streams::streambuf<uint8_t>::traits::eof()) {
        *eof = eof_ = true;
      } else {
        out->push_back(static_cast<char>(static_cast<uint8_t>(c)));
      }
      return ApiStatus();
    } catch (const std::exception& e) {
      return ApiStatus(Code::kUnavailable, std::string("connection failed while reading the response: ") + e.what());
    }
  }

 private:
  const std::unique_ptr<http::client::http_client> client_;
  pplx::cancellation_token_source cts_;
  http::http_response response_;
  Concurrency::streams::streambuf<uint8_t> buf_;
  bool eof_ = false;
};

class RestTransport final : public HttpTransport {
 public:
  RestTransport(std::string server, ClientOptions options, http::client::http_client_config base)
      : server_(std::move(server)),
        options_(std::move(options)),
        base_config_(std::move(base)),
        http_(MakeHttpClient(options_.request_timeout)) {}

  // The status line, headers and the whole body within request_timeout, waited for once. The body
  // is capped while it downloads: by Content-Length before it starts, else by the progress
  // handler, which cancels the request as soon as the cap is passed.
  StatusOr<HttpReply> RoundTrip(const HttpRequest& request, const std::string& token) override {
    const std::string what = Describe(request);
    const size_t limit = options_.max_response_bytes;
    const Clock::time_point deadline = Clock::now() + options_.request_timeout;
    pplx::cancellation_token_source cts;
    auto too_large = std::make_shared<std::atomic<bool>>(false);
    pplx::task<http::http_response> complete;
    try {
      http::http_request req = BuildRequest(request, token);
      req.set_progress_handler([cts, limit, too_large](http::message_direction::direction direction, uint64_t bytes) {
        if (direction == http::message_direction::download && bytes > limit && !too_large->exchange(true)) {
          cts.cancel();
        }
      });
      complete = http_->request(req, cts.get_token())
                     .then([cts, limit, too_large](http::http_response response) -> pplx::task<http::http_response> {
                       if (response.headers().has("Content-Length") && response.headers().content_length() > limit) {
                         too_large->store(true);
                         cts.cancel();
                         return pplx::task_from_result(response);
                       }
                       return response.content_ready();
                     });
    } catch (const std::exception& e) {
      return ApiStatus(Code::kUnavailable, what + ": " + e.what());
    }
    if (!WaitForTask(complete, deadline, nullptr)) {
      cts.cancel();
      WaitForTask(complete, Clock::now() + kAbortGrace, nullptr);
      if (too_large->load()) return TooLarge(what, limit);
      return ApiStatus(Code::kUnavailable, what + ": timed out after " +
                                               std::to_string(options_.request_timeout.count()) + " ms");
    }
    http::http_response response;
    try {
      response = complete.get();
    } catch (const std::exception& e) {
      if (too_large->load()) return TooLarge(what, limit);
      return ApiStatus(Code::kUnavailable, what + ": " + e.what());
    }
    if (too_large->load()) return TooLarge(what, limit);
    HttpReply reply;
    reply.head = HeadOf(response);
    try {
      // The body is complete: these reads are served from memory at once.
      Concurrency::streams::streambuf<uint8_t> buf = response.body().streambuf();
      reply.body.resize(std::min(buf.in_avail(), limit + 1));
      if (!reply.body.empty()) {
        reply.body.resize(buf.getn(reinterpret_cast<uint8_t*>(&reply.body[0]), reply.body.size()).get());
      }
    } catch (const std::exception& e) {
      return ApiStatus(Code::kUnavailable, what + ": reading the response: " + e.what());
    }
    if (reply.body.size() > limit) return TooLarge(what, limit);
    return reply;
  }

  // Each stream has an http_client of its own, whose timeout is the stream's idle timeout.
  StatusOr<std::unique_ptr<HttpStream>> Open(const HttpRequest& request, const std::string& token,
                                             Clock::time_point deadline, const CancelToken* cancel,
                                             milliseconds idle) override {
    const std::string what = Describe(request);
    std::unique_ptr<http::client::http_client> client;
    try {
      client = MakeHttpClient(idle);
    } catch (const std::exception& e) {
      return ApiStatus(Code::kConfig, what + ": " + e.what());
    }
    pplx::cancellation_token_source cts;
    pplx::task<http::http_response> pending;
    try {
      pending = client->request(BuildRequest(request, token), cts.get_token());
    } catch (const std::exception& e) {
      return ApiStatus(Code::kUnavailable, what + ": " + e.what());
    }
    if (!WaitForTask(pending, deadline, cancel)) {
      cts.cancel();
      WaitForTask(pending, Clock::now() + kAbortGrace, nullptr);
      if (cancel && cancel->cancelled()) return ApiStatus(Code::kCancelled, what + ": cancelled");
      return ApiStatus(Code::kUnavailable, what + ": timed out after " +
                                               std::to_string(options_.request_timeout.count()) + " ms");
    }
    try {
      return std::unique_ptr<HttpStream>(std::make_unique<RestStream>(std::move(client), cts, pending.get()));
    } catch (const std::exception& e) {
      return ApiStatus(Code::kUnavailable, what + ": " + e.what());
    }
  }

 private:
  std::unique_ptr<http::client::http_client> MakeHttpClient(milliseconds idle_timeout) const {
    http::client::http_client_config config = base_config_;
    config.set_timeout(idle_timeout);
    return std::make_unique<http::client::http_client>(web::uri(server_), config);
  }

  http::http_request BuildRequest(const HttpRequest& request, const std::string& token) const {
    http::http_request req(request.method);
    req.set_request_uri(web::uri(request.target));
    http::http_headers& headers = req.headers();
    headers.add("Accept", "application/json");
    headers.add("User-Agent", options_.user_agent);
    if (!token.empty()) headers.add("Authorization", "Bearer " + token);
    if (request.body) {
      // As bytes: cpprestsdk's set_body(std::string) reads the string through a stream of unsigned
      // char over a char buffer, a type pun UBSan reports (vptr, astreambuf.h) on every request. A
      // byte vector is read through its own type. The Content-Type set first is kept.
      headers.set_content_type(request.content_type);
      req.set_body(std::vector<unsigned char>(request.body->begin(), request.body->end()));
    }
    return req;
  }

  const std::string server_;
  const ClientOptions options_;
  const http::client::http_client_config base_config_;
  const std::unique_ptr<http::client::http_client> http_;  // shared by all threads; pools connections
};

// Sizes cpprestsdk's I/O pool (see ConfigureIoThreads) unless something used it already.
void SizeIoThreadsOnce() {
  static std::once_flag sized;
  std::call_once(sized, [] { ConfigureIoThreads(std::clamp<size_t>(std::thread::hardware_concurrency() / 2, 1, 8)); });
}

}  // namespace
}  // namespace internal

bool ConfigureIoThreads(size_t threads) {
  try {
    crossplat::threadpool::initialize_with_threads(std::max<size_t>(1, threads));
    return true;
  } catch (const std::exception&) {
    return false;  // already running
  }
}

StatusOr<std::shared_ptr<Client>> Client::Create(const ClusterConfig& config, const ClientOptions& options) {
  internal::SizeIoThreadsOnce();
  if (ApiStatus s = internal::CheckClientSetup(config, options); !s.ok()) return s;
  auto tls = internal::LoadTlsMaterial(config);
  if (!tls.ok()) return tls.status();

  const bool https = config.server.rfind("https://", 0) == 0;
  web::http::client::http_client_config base;
  // The API server does not redirect; following one would hand the bearer token to another host.
  base.set_max_redirects(0);
  try {
    web::uri uri(config.server);
    if (uri.scheme() != "https" && uri.scheme() != "http") {
      return ApiStatus(Code::kConfig, "server " + config.server + " is not an http:// or https:// URL");
    }
    if (https) {
      if (auto checked = internal::NewTlsContext(*tls); !checked.ok()) return checked.status();
      base.set_validate_certificates(!config.insecure_skip_tls_verify);
      base.set_ssl_context_callback([material = std::move(*tls)](boost::asio::ssl::context& ctx) {
        internal::ApplyTls(material, ctx);  // checked above; a failure here shows up as a failed handshake
      });
    }
    auto transport = std::make_unique<internal::RestTransport>(config.server, options, std::move(base));
    return internal::NewApiClient(config, options, std::move(transport));
  } catch (const std::exception& e) {
    return ApiStatus(Code::kConfig, "server " + config.server + ": " + e.what());
  }
}

}  // namespace fleet::kube

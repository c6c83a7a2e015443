// Client over cpprestsdk's http_client. cpprest, Boost and nlohmann exceptions stop here and come
// back as ApiStatus values.
//
// Waiting: pplx tasks are only waited on from the caller's own thread (never inside a
// continuation, which would hold a pool thread hostage). A continuation only observes the result
// (so that no task exception goes unobserved, which pplx punishes with std::terminate) and wakes
// the waiter, which can then also honour deadlines and CancelTokens.
//
// Bodies: cpprest pushes a body into a producer/consumer buffer as the socket delivers it, with no
// limit of its own. A request's body is capped by its Content-Length before it is read and by a
// progress handler while it downloads; a watch stream is drained line by line with the same cap.
// Cancelling the request (which closes its connection) stops a body that is too large, a deadline
// that passes and a caller who cancels.
#include "fleet/kube/client.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include <boost/asio/ssl.hpp>
#include <cpprest/http_client.h>
#include <pplx/threadpool.h>

#include "fleet/kube/rate_limiter.h"
#include "packed_json.h"

namespace fleet::kube {

std::string Resource::ApiPrefix() const {
  return group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
}

namespace {

namespace http = web::http;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kCancelPoll{20};            // how often blocked waits look at a CancelToken
constexpr milliseconds kAbortGrace{2000};          // how long to wait for a cancelled request to wind down
constexpr std::chrono::minutes kTokenRereadEvery{1};
constexpr std::chrono::seconds kWatchIdleGrace{30};  // beyond timeoutSeconds before a silent watch is dead
constexpr std::chrono::seconds kMaxRetryAfterWait{30};  // longer Retry-Afters go back to the caller
constexpr size_t kReadChunk = 64 * 1024;

std::string Escape(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

class Query {
 public:
  Query& Add(const std::string& key, const std::string& value) {
    if (!value.empty()) text_ += (text_.empty() ? "?" : "&") + key + "=" + Escape(value);
    return *this;
  }
  const std::string& str() const { return text_; }

 private:
  std::string text_;
};

// The query of one page of a paged list: the selectors and limit of `options`, then the
// resourceVersion for the first page or the continue token `next` for the ones after it.
Query PageQuery(const ListOptions& options, const std::string& next) {
  Query query;
  query.Add("labelSelector", options.label_selector).Add("fieldSelector", options.field_selector);
  if (options.limit > 0) query.Add("limit", std::to_string(options.limit));
  if (next.empty()) {
    query.Add("resourceVersion", options.resource_version);
  } else {
    query.Add("continue", next);
  }
  return query;
}

// Serializes a request body; invalid UTF-8 in strings is replaced rather than thrown about.
std::string Dump(const Json& json) { return json.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string Excerpt(std::string_view body) {
  std::string out(body.substr(0, 120));
  std::replace(out.begin(), out.end(), '\n', ' ');
  return body.size() > 120 ? out + "..." : out;
}

bool IsJsonContentType(const std::string& content_type) {
  std::string media = content_type.substr(0, content_type.find(';'));
  media.erase(std::remove(media.begin(), media.end(), ' '), media.end());
  std::transform(media.begin(), media.end(), media.begin(), [](unsigned char c) { return std::tolower(c); });
  return media == "application/json";
}

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

// Reads a response body incrementally: whatever has arrived, else blocks for the next byte.
class BodyReader {
 public:
  explicit BodyReader(const http::http_response& response) : buf_(response.body().streambuf()) {}

  // Appends up to `max_bytes` (> 0) to *out. Sets *eof at the end of the body. kUnavailable when
  // the connection failed or `deadline` passed, kCancelled when `cancel` fired.
  ApiStatus Read(std::string* out, size_t max_bytes, Clock::time_point deadline, const CancelToken* cancel,
                 bool* eof) {
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
        if (got == 0) *eof = true;
        return ApiStatus();
      }
      auto next = buf_.bumpc();
      if (!WaitForTask(next, deadline, cancel)) {
        if (cancel && cancel->cancelled()) return ApiStatus(Code::kCancelled, "cancelled");
        return ApiStatus(Code::kUnavailable, "timed out reading the response body");
      }
      const auto c = next.get();
      if (c == Concurrency::streams::streambuf<uint8_t>::traits::eof()) {
        *eof = true;
      } else {
        out->push_back(static_cast<char>(static_cast<uint8_t>(c)));
      }
      return ApiStatus();
    } catch (const std::exception& e) {
      return ApiStatus(Code::kUnavailable, std::string("connection failed while reading the response: ") + e.what());
    }
  }

 private:
  Concurrency::streams::streambuf<uint8_t> buf_;
};

// The bearer token: fixed, or a file re-read at most once a minute and at once after a 401.
class TokenSource {
 public:
  TokenSource(std::string token, std::string file) : token_(std::move(token)), file_(std::move(file)) {
    if (!file_.empty()) ReloadLocked();
  }

  std::string Current() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!file_.empty() && Clock::now() - read_at_ >= kTokenRereadEvery) ReloadLocked();
    return token_;
  }

  // After a 401: re-reads the file; true when the token differs from the one that was refused.
  bool ReloadAfterUnauthorized(const std::string& refused) {
    if (file_.empty()) return false;
    std::lock_guard<std::mutex> lock(mu_);
    ReloadLocked();
    return token_ != refused;
  }

 private:
  void ReloadLocked() {
    read_at_ = Clock::now();
    std::ifstream in(file_);
    std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    if (!token.empty()) token_ = std::move(token);  // a missing or empty file keeps the last token
  }

  std::mutex mu_;
  std::string token_;
  const std::string file_;
  Clock::time_point read_at_{};
};

struct TlsMaterial {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
};

// Trusts exactly the configured CA (as client-go does), and presents the client certificate.
boost::system::error_code ApplyTls(const TlsMaterial& tls, boost::asio::ssl::context& ctx) {
  boost::system::error_code ec;
  if (!tls.ca_pem.empty()) {
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

StatusOr<std::string> DataOrFile(const std::string& data, const std::string& file, const char* what) {
  if (!data.empty() || file.empty()) return data;
  std::ifstream in(file, std::ios::binary);
  if (!in) return ApiStatus(Code::kConfig, std::string(what) + " " + file + ": " + std::strerror(errno));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A finished HTTP exchange (any status code).
struct Reply {
  int status = 0;
  std::string body;
  std::string content_type;
  std::optional<std::chrono::seconds> retry_after;
};

std::optional<std::chrono::seconds> ParseRetryAfter(const http::http_headers& headers) {
  auto it = headers.find("Retry-After");
  if (it == headers.end()) return std::nullopt;
  const std::string& value = it->second;
  if (value.empty() || value.size() > 9 || value.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;  // HTTP-date form or nonsense: fall back to our own backoff
  }
  return std::chrono::seconds(std::stoll(value));
}

// How a request may be repeated after a transient failure.
enum class Repeat { kAlways, kOnlyRejected };

struct Request {
  Request(http::method m, std::string p, std::optional<std::string> b = std::nullopt)
      : method(std::move(m)), path(std::move(p)), body(std::move(b)) {}
  http::method method;
  std::string path;                 // with query
  std::optional<std::string> body;
  std::string content_type = "application/json";
  Repeat repeat = Repeat::kAlways;
};

class RestClient final : public Client {
 public:
  RestClient(ClusterConfig config, ClientOptions options, http::client::http_client_config base)
      : config_(std::move(config)),
        options_(std::move(options)),
        base_config_(std::move(base)),
        tokens_(config_.token, config_.token_file),
        limiter_(options_.qps, options_.burst > 0 ? options_.burst : std::max(1, static_cast<int>(options_.qps))),
        http_(MakeHttpClient(options_.request_timeout)) {}

  StatusOr<Json> GetPath(const std::string& path) override {
    if (path.empty() || path[0] != '/') return ApiStatus(Code::kBadRequest, "GetPath: \"" + path + "\" is not an absolute path");
    return CallForObject({http::methods::GET, path});
  }

  StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    if (name.empty()) return ApiStatus(Code::kBadRequest, "get of " + r.plural + ": no name given");
    return CallForObject({http::methods::GET, ObjectPath(r, Namespace(ns, Json()), name)});
  }

  StatusOr<Json> List(const Resource& r, const std::string& ns, const ListOptions& options) override {
    Json result;
    Json items = Json::array();
    std::string next;
    do {
      const Query query = PageQuery(options, next);
      auto page = CallForObject({http::methods::GET, CollectionPath(r, ns) + query.str()});
      if (!page.ok()) return page.status();
      auto page_items = page->find("items");
      if (page_items != page->end() && page_items->is_array()) {
        for (Json& item : *page_items) items.push_back(std::move(item));
      } else if (page_items != page->end() && !page_items->is_null()) {
        return ApiStatus(Code::kMalformed, "list " + r.plural + ": items is not an array");
      }
      const std::string previous = std::move(next);
      next.clear();
      if (auto meta = page->find("metadata"); meta != page->end() && meta->is_object()) {
        if (auto cont = meta->find("continue"); cont != meta->end() && cont->is_string()) next = *cont;
        meta->erase("continue");
      }
      if (!next.empty() && next == previous) {
        return ApiStatus(Code::kMalformed, "list " + r.plural + ": the server repeated its continue token");
      }
      page->erase("items");
      result = std::move(*page);
    } while (!next.empty());
    result["items"] = std::move(items);
    return result;
  }

  StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& object) override {
    const Json& meta = Metadata(object);
    const bool generated = !meta.contains("name") && meta.contains("generateName");
    Request request{http::methods::POST, CollectionPath(r, Namespace(ns, object)), Dump(object)};
    request.repeat = generated ? Repeat::kOnlyRejected : Repeat::kAlways;
    return CallForObject(std::move(request));
  }

  StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object) override {
    return Put(r, ns, object, "");
  }

  StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns, const Json& object) override {
    return Put(r, ns, object, "status");
  }

  StatusOr<Json> MergePatch(const Resource& r, const std::string& ns, const std::string& name, const Json& patch,
                            const std::string& subresource) override {
    if (name.empty()) return ApiStatus(Code::kBadRequest, "merge patch of " + r.plural + ": no name given");
    std::string path = ObjectPath(r, Namespace(ns, Json()), name);
    if (!subresource.empty()) path += "/" + Escape(subresource);
    Request request{http::methods::PATCH, path, Dump(patch)};
    request.content_type = "application/merge-patch+json";
    return CallForObject(std::move(request));
  }

  ApiStatus Delete(const Resource& r, const std::string& ns, const std::string& name,
                   const DeleteOptions& options) override {
    if (name.empty()) return ApiStatus(Code::kBadRequest, "delete of " + r.plural + ": no name given");
    Json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
    if (!options.propagation_policy.empty()) body["propagationPolicy"] = options.propagation_policy;
    if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
    if (!options.precondition_uid.empty()) body["preconditions"] = {{"uid", options.precondition_uid}};
    auto reply = Call({http::methods::DEL, ObjectPath(r, Namespace(ns, Json()), name), Dump(body)});
    return reply.ok() ? ApiStatus() : reply.status();
  }

  StatusOr<std::string> GetLog(const std::string& ns, const std::string& pod, const std::string& container,
                               int64_t tail_lines) override {
    Query query;
    query.Add("container", container);
    if (tail_lines >= 0) query.Add("tailLines", std::to_string(tail_lines));
    auto reply = Call({http::methods::GET, ObjectPath(Resource::Pods(), Namespace(ns, Json()), pod) + "/log" +
                                               query.str()});
    if (!reply.ok()) return reply.status();
    return std::move(reply->body);
  }

  ApiStatus ListPages(const Resource& r, const std::string& ns, const ListOptions& options,
                      const std::function<bool(std::string_view page)>& on_page) override {
    std::string next;
    do {
      const Query query = PageQuery(options, next);
      Request request{http::methods::GET, CollectionPath(r, ns) + query.str()};
      const std::string what = request.method + " " + request.path;
      auto reply = Call(std::move(request));
      if (!reply.ok()) return reply.status();
      if (!IsJsonContentType(reply->content_type)) {
        return ApiStatus(Code::kMalformed, what + ": answered with Content-Type \"" + reply->content_type +
                                               "\", expected application/json",
                         reply->status);
      }
      // The continue token, and a check of the page, without a DOM (a parse that writes nothing).
      internal::ListBodyInfo info;
      std::string error;
      if (!internal::PackListBody(reply->body, {}, &info, &error)) {
        return ApiStatus(Code::kMalformed, "list " + r.plural + ": " + error + " (" +
                                               std::to_string(reply->body.size()) + " bytes: " +
                                               Excerpt(reply->body) + ")",
                         reply->status);
      }
      const std::string previous = std::move(next);
      next = std::move(info.continue_token);
      if (!next.empty() && next == previous) {
        return ApiStatus(Code::kMalformed, "list " + r.plural + ": the server repeated its continue token");
      }
      if (!on_page(reply->body)) return ApiStatus();
    } while (!next.empty());
    return ApiStatus();
  }

  ApiStatus Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                  const std::function<bool(const WatchEvent&)>& on_event, const CancelToken& cancel) override;
  ApiStatus WatchLines(const Resource& r, const std::string& ns, const WatchOptions& options,
                       const std::function<bool(std::string_view line)>& on_line, const CancelToken& cancel) override;

 private:
  // What a watch does with one line: OK to go on (*stop to end the watch there), else the status
  // that ends it.
  using LineHandler = std::function<ApiStatus(std::string_view line, bool* stop)>;
  std::unique_ptr<http::client::http_client> MakeHttpClient(std::chrono::milliseconds idle_timeout) const {
    http::client::http_client_config config = base_config_;
    config.set_timeout(idle_timeout);
    return std::make_unique<http::client::http_client>(web::uri(config_.server), config);
  }

  static const Json& Metadata(const Json& object) {
    static const Json kEmpty = Json::object();
    if (!object.is_object()) return kEmpty;
    auto it = object.find("metadata");
    return (it != object.end() && it->is_object()) ? *it : kEmpty;
  }

  static std::string MetaString(const Json& object, const char* key) {
    const Json& meta = Metadata(object);
    auto it = meta.find(key);
    return (it != meta.end() && it->is_string()) ? it->get<std::string>() : std::string();
  }

  std::string Namespace(const std::string& ns, const Json& object) const {
    if (!ns.empty()) return ns;
    std::string from_object = MetaString(object, "namespace");
    return from_object.empty() ? config_.default_namespace : from_object;
  }

  static std::string CollectionPath(const Resource& r, const std::string& ns) {
    std::string path = r.ApiPrefix();
    if (r.namespaced && !ns.empty()) path += "/namespaces/" + Escape(ns);
    return path + "/" + r.plural;
  }

  static std::string ObjectPath(const Resource& r, const std::string& ns, const std::string& name) {
    return CollectionPath(r, ns) + "/" + Escape(name);
  }

  StatusOr<Json> Put(const Resource& r, const std::string& ns, const Json& object, const std::string& sub) {
    const std::string name = MetaString(object, "name");
    if (name.empty()) return ApiStatus(Code::kBadRequest, "update of " + r.plural + ": object has no metadata.name");
    std::string path = ObjectPath(r, Namespace(ns, object), name);
    if (!sub.empty()) path += "/" + sub;
    return CallForObject({http::methods::PUT, path, Dump(object)});
  }

  StatusOr<Json> CallForObject(Request request) {
    const std::string what = request.method + " " + request.path;
    auto reply = Call(std::move(request));
    if (!reply.ok()) return reply.status();
    if (!IsJsonContentType(reply->content_type)) {
      return ApiStatus(Code::kMalformed, what + ": answered with Content-Type \"" + reply->content_type +
                                             "\", expected application/json",
                       reply->status);
    }
    Json json;
    try {
      json = Json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
    } catch (const std::exception&) {
      json = Json(Json::value_t::discarded);
    }
    if (json.is_discarded() || !json.is_object()) {
      return ApiStatus(Code::kMalformed, what + ": the answer is not a JSON object (" +
                                             std::to_string(reply->body.size()) + " bytes: " + Excerpt(reply->body) +
                                             ")",
                       reply->status);
    }
    return json;
  }

  // The request with retries, rate limiting and token refresh. A non-2xx answer becomes its status.
  StatusOr<Reply> Call(Request request) {
    bool token_retried = false;
    for (int attempt = 1;; ++attempt) {
      limiter_.Wait();
      const std::string token = tokens_.Current();
      StatusOr<Reply> reply = Exchange(request, token);
      ApiStatus status = reply.ok() ? StatusFromResponse(reply->status, reply->body, reply->retry_after)
                                    : reply.status();
      if (status.ok()) return reply;
      if (status.code() == Code::kUnauthorized && !token_retried && tokens_.ReloadAfterUnauthorized(token)) {
        token_retried = true;
        --attempt;  // a fresh token is a new request, not a retry
        continue;
      }
      const bool repeatable = request.repeat == Repeat::kAlways || status.code() == Code::kTooManyRequests;
      const bool long_wait = status.retry_after() && *status.retry_after() > kMaxRetryAfterWait;
      if (!status.IsRetryable() || !repeatable || long_wait || attempt >= options_.max_attempts) return status;
      std::this_thread::sleep_for(RetryDelay(attempt, status));
    }
  }

  milliseconds RetryDelay(int attempt, const ApiStatus& status) const {
    if (status.retry_after() && *status.retry_after() > std::chrono::seconds(0)) {
      return std::chrono::duration_cast<milliseconds>(*status.retry_after());
    }
    // Exponential, capped, with "equal jitter": uniform in [d/2, d].
    const double exp = std::pow(2.0, std::min(attempt - 1, 30));
    const double capped = std::min(static_cast<double>(options_.backoff_cap.count()),
                                   static_cast<double>(options_.backoff_base.count()) * exp);
    thread_local std::mt19937_64 rng(std::random_device{}());
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    return milliseconds(static_cast<int64_t>(capped * jitter(rng)));
  }

  http::http_request BuildRequest(const Request& request, const std::string& token) const {
    http::http_request req(request.method);
    req.set_request_uri(web::uri(request.path));
    http::http_headers& headers = req.headers();
    headers.add("Accept", "application/json");
    headers.add("User-Agent", options_.user_agent);
    if (!token.empty()) headers.add("Authorization", "Bearer " + token);
    if (request.body) req.set_body(*request.body, request.content_type);
    return req;
  }

  // Starts `request` and waits for the response headers. On failure, the request is cancelled.
  StatusOr<http::http_response> Start(http::client::http_client& client, const Request& request,
                                      const std::string& token, pplx::cancellation_token_source& cts,
                                      Clock::time_point deadline, const CancelToken* cancel) {
    const std::string what = request.method + " " + request.path;
    pplx::task<http::http_response> pending;
    try {
      pending = client.request(BuildRequest(request, token), cts.get_token());
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
      return pending.get();
    } catch (const std::exception& e) {
      return ApiStatus(Code::kUnavailable, what + ": " + e.what());
    }
  }

  // Reads a whole (bounded) body. On failure, the request is cancelled.
  StatusOr<std::string> ReadAll(const http::http_response& response, const std::string& what,
                                pplx::cancellation_token_source& cts, Clock::time_point deadline,
                                const CancelToken* cancel) {
    const size_t limit = options_.max_response_bytes;
    if (response.headers().has("Content-Length") && response.headers().content_length() > limit) {
      cts.cancel();
      return ApiStatus(Code::kMalformed, what + ": response of " + std::to_string(response.headers().content_length()) +
                                             " bytes exceeds the limit of " + std::to_string(limit),
                       response.status_code());
    }
    std::string body;
    BodyReader reader(response);
    for (bool eof = false; !eof;) {
      ApiStatus status = reader.Read(&body, limit + 1 - body.size(), deadline, cancel, &eof);
      if (!status.ok()) {
        cts.cancel();
        return ApiStatus(status.code(), what + ": " + status.message());
      }
      if (body.size() > limit) {
        cts.cancel();
        return ApiStatus(Code::kMalformed, what + ": response exceeds the limit of " + std::to_string(limit) + " bytes",
                         response.status_code());
      }
    }
    return body;
  }

  // One attempt: the status line, headers and the whole body within request_timeout, waited for
  // once. The body is capped while it downloads: by Content-Length before it starts, else by the
  // progress handler, which cancels the request as soon as the cap is passed.
  StatusOr<Reply> Exchange(const Request& request, const std::string& token) {
    const std::string what = request.method + " " + request.path;
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
    Reply reply;
    reply.status = response.status_code();
    reply.content_type = response.headers().content_type();
    reply.retry_after = ParseRetryAfter(response.headers());
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

  static ApiStatus TooLarge(const std::string& what, size_t limit) {
    return ApiStatus(Code::kMalformed,
                     what + ": the response exceeds the limit of " + std::to_string(limit) + " bytes");
  }

  // Splits the watch stream into lines and hands each non-blank one to `on_line`. Returns OK at
  // the end of the stream, or the status that ended the watch; *stop when the handler said so.
  ApiStatus StreamLines(const http::http_response& response, const LineHandler& on_line, const CancelToken& cancel,
                        bool* stop);
  // Opens the watch (token refresh on 401, status and content type checked) and streams it.
  ApiStatus WatchStream(const Resource& r, const std::string& ns, const WatchOptions& options,
                        const LineHandler& on_line, const CancelToken& cancel);

  const ClusterConfig config_;
  const ClientOptions options_;
  const http::client::http_client_config base_config_;
  TokenSource tokens_;
  TokenBucket limiter_;
  const std::unique_ptr<http::client::http_client> http_;  // shared by all threads; pools connections
};

StatusOr<WatchEventType> ParseEventType(const std::string& type) {
  if (type == "ADDED") return WatchEventType::kAdded;
  if (type == "MODIFIED") return WatchEventType::kModified;
  if (type == "DELETED") return WatchEventType::kDeleted;
  if (type == "BOOKMARK") return WatchEventType::kBookmark;
  if (type == "ERROR") return WatchEventType::kError;
  return ApiStatus(Code::kMalformed, "watch event of unknown type \"" + type + "\"");
}

// One line of a watch stream -> an event.
ApiStatus DecodeEvent(std::string_view line, WatchEvent* event) {
  Json json;
  try {
    json = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  } catch (const std::exception&) {
    json = Json(Json::value_t::discarded);
  }
  if (json.is_discarded() || !json.is_object()) {
    return ApiStatus(Code::kMalformed, "watch event is not a JSON object: " + Excerpt(line));
  }
  auto type = json.find("type");
  auto object = json.find("object");
  if (type == json.end() || !type->is_string() || object == json.end() || !object->is_object()) {
    return ApiStatus(Code::kMalformed, "watch event without type or object: " + Excerpt(line));
  }
  auto parsed = ParseEventType(type->get<std::string>());
  if (!parsed.ok()) return parsed.status();
  event->type = *parsed;
  event->object = std::move(*object);
  return ApiStatus();
}

ApiStatus RestClient::StreamLines(const http::http_response& response, const LineHandler& on_line,
                                  const CancelToken& cancel, bool* stop) {
  const size_t limit = options_.max_response_bytes;
  BodyReader reader(response);
  std::string buffer;
  size_t scanned = 0;  // bytes of `buffer` known to hold no newline
  for (bool eof = false; !eof;) {
    ApiStatus status = reader.Read(&buffer, kReadChunk, Clock::time_point::max(), &cancel, &eof);
    if (!status.ok()) return status;
    if (eof && !buffer.empty() && buffer.back() != '\n') buffer.push_back('\n');  // a last unterminated line
    size_t start = 0;
    for (size_t nl; (nl = buffer.find('\n', scanned)) != std::string::npos; scanned = start) {
      std::string_view line(buffer.data() + start, nl - start);
      start = nl + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
      if (ApiStatus s = on_line(line, stop); !s.ok() || *stop) return s;
    }
    buffer.erase(0, start);
    scanned = buffer.size();
    if (buffer.size() > limit) {
      return ApiStatus(Code::kMalformed, "watch event longer than the limit of " + std::to_string(limit) + " bytes");
    }
  }
  return ApiStatus();
}

ApiStatus RestClient::Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                            const std::function<bool(const WatchEvent&)>& on_event, const CancelToken& cancel) {
  return WatchStream(
      r, ns, options,
      [&on_event](std::string_view line, bool* stop) {
        WatchEvent event;
        if (ApiStatus s = DecodeEvent(line, &event); !s.ok()) return s;
        if (event.type == WatchEventType::kError) {
          ApiStatus error = StatusFromResponse(0, event.object.dump());
          return error.ok() ? ApiStatus(Code::kMalformed, "watch ERROR event without an error code") : error;
        }
        *stop = !on_event(event);
        return ApiStatus();
      },
      cancel);
}

ApiStatus RestClient::WatchLines(const Resource& r, const std::string& ns, const WatchOptions& options,
                                 const std::function<bool(std::string_view line)>& on_line, const CancelToken& cancel) {
  return WatchStream(
      r, ns, options,
      [&on_line](std::string_view line, bool* stop) {
        *stop = !on_line(line);
        return ApiStatus();
      },
      cancel);
}

ApiStatus RestClient::WatchStream(const Resource& r, const std::string& ns, const WatchOptions& options,
                                  const LineHandler& on_line, const CancelToken& cancel) {
  Query query;
  query.Add("watch", "true")
      .Add("resourceVersion", options.resource_version)
      .Add("labelSelector", options.label_selector)
      .Add("fieldSelector", options.field_selector);
  if (options.allow_bookmarks) query.Add("allowWatchBookmarks", "true");
  if (options.timeout_seconds > 0) query.Add("timeoutSeconds", std::to_string(options.timeout_seconds));
  const Request request{http::methods::GET, CollectionPath(r, ns) + query.str()};
  const std::string what = "watch " + request.path;

  // Each watch has a client of its own: the idle timeout has to outlast the server's timeoutSeconds.
  const auto idle =
      std::chrono::seconds(options.timeout_seconds > 0 ? options.timeout_seconds : 3600) + kWatchIdleGrace;
  std::unique_ptr<http::client::http_client> client;
  try {
    client = MakeHttpClient(std::chrono::duration_cast<milliseconds>(idle));
  } catch (const std::exception& e) {
    return ApiStatus(Code::kConfig, what + ": " + e.what());
  }
  bool token_retried = false;
  while (true) {
    if (cancel.cancelled()) return ApiStatus(Code::kCancelled, what + ": cancelled");
    limiter_.Wait();
    const std::string token = tokens_.Current();
    pplx::cancellation_token_source cts;
    auto response = Start(*client, request, token, cts, Clock::now() + options_.request_timeout, &cancel);
    if (!response.ok()) return response.status();
    if (response->status_code() != http::status_codes::OK) {
      auto body = ReadAll(*response, what, cts, Clock::now() + options_.request_timeout, &cancel);
      if (!body.ok()) return body.status();
      ApiStatus status = StatusFromResponse(response->status_code(), *body, ParseRetryAfter(response->headers()));
      if (status.code() == Code::kUnauthorized && !token_retried && tokens_.ReloadAfterUnauthorized(token)) {
        token_retried = true;
        continue;
      }
      return status.ok() ? ApiStatus(Code::kMalformed, what + ": unexpected HTTP status " +
                                                            std::to_string(response->status_code()))
                         : status;
    }
    if (!IsJsonContentType(response->headers().content_type())) {
      cts.cancel();
      return ApiStatus(Code::kMalformed, what + ": answered with Content-Type \"" +
                                             response->headers().content_type() + "\", expected application/json");
    }
    bool stop = false;
    ApiStatus status;
    try {
      status = StreamLines(*response, on_line, cancel, &stop);
    } catch (...) {
      cts.cancel();  // the handler threw: close the stream, let the exception go to the caller
      throw;
    }
    if (!status.ok() || stop) cts.cancel();  // close the connection; the server may still be sending
    if (status.code() == Code::kCancelled) return ApiStatus(Code::kCancelled, what + ": cancelled");
    return status;
  }
}

const char* EventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded: return "ADDED";
    case WatchEventType::kModified: return "MODIFIED";
    case WatchEventType::kDeleted: return "DELETED";
    case WatchEventType::kBookmark: return "BOOKMARK";
    case WatchEventType::kError: return "ERROR";
  }
  return "ERROR";
}

}  // namespace

bool ConfigureIoThreads(size_t threads) {
  try {
    crossplat::threadpool::initialize_with_threads(std::max<size_t>(1, threads));
    return true;
  } catch (const std::exception&) {
    return false;  // already running
  }
}

StatusOr<Json> Client::GetPath(const std::string& path) {
  return ApiStatus(Code::kBadRequest, "GetPath(" + path + ") is not supported by this client");
}

ApiStatus Client::ListPages(const Resource& r, const std::string& ns, const ListOptions& options,
                            const std::function<bool(std::string_view page)>& on_page) {
  StatusOr<Json> list = List(r, ns, options);
  if (!list.ok()) return list.status();
  const std::string page = Dump(*list);
  on_page(page);
  return ApiStatus();
}

ApiStatus Client::WatchLines(const Resource& r, const std::string& ns, const WatchOptions& options,
                             const std::function<bool(std::string_view line)>& on_line, const CancelToken& cancel) {
  return Watch(
      r, ns, options,
      [&on_line](const WatchEvent& event) {
        std::string line = "{\"type\":\"";
        line += EventTypeName(event.type);
        line += "\",\"object\":";
        line += Dump(event.object);
        line += '}';
        return on_line(line);
      },
      cancel);
}

StatusOr<std::shared_ptr<Client>> Client::Create(const ClusterConfig& config, const ClientOptions& options) {
  static std::once_flag sized;
  std::call_once(sized, [] { ConfigureIoThreads(std::clamp<size_t>(std::thread::hardware_concurrency() / 2, 1, 8)); });
  if (config.server.empty()) return ApiStatus(Code::kConfig, "cluster config has no server");
  if (options.qps < 0 || options.max_attempts < 1 || options.max_response_bytes == 0 ||
      options.request_timeout <= milliseconds(0)) {
    return ApiStatus(Code::kConfig, "client options: qps must be >= 0, max_attempts >= 1, max_response_bytes > 0 "
                                    "and request_timeout > 0");
  }
  TlsMaterial tls;
  auto ca = DataOrFile(config.ca_data, config.ca_file, "CA file");
  if (!ca.ok()) return ca.status();
  auto cert = DataOrFile(config.client_cert_data, config.client_cert_file, "client certificate file");
  if (!cert.ok()) return cert.status();
  auto key = DataOrFile(config.client_key_data, config.client_key_file, "client key file");
  if (!key.ok()) return key.status();
  if (cert->empty() != key->empty()) {
    return ApiStatus(Code::kConfig, "a client certificate needs a client key and vice versa");
  }
  tls.ca_pem = std::move(*ca);
  tls.cert_pem = std::move(*cert);
  tls.key_pem = std::move(*key);

  const bool https = config.server.rfind("https://", 0) == 0;
  http::client::http_client_config base;
  // The API server does not redirect; following one would hand the bearer token to another host.
  base.set_max_redirects(0);
  try {
    web::uri uri(config.server);
    if (uri.scheme() != "https" && uri.scheme() != "http") {
      return ApiStatus(Code::kConfig, "server " + config.server + " is not an http:// or https:// URL");
    }
    if (https) {
      // Check the PEM material once here, so that a bad file is a config error, not a failed handshake.
      boost::asio::ssl::context probe(boost::asio::ssl::context::sslv23);
      if (boost::system::error_code ec = ApplyTls(tls, probe)) {
        return ApiStatus(Code::kConfig, "TLS material (CA, client certificate or key) is invalid: " + ec.message());
      }
      base.set_validate_certificates(!config.insecure_skip_tls_verify);
      base.set_ssl_context_callback([tls](boost::asio::ssl::context& ctx) {
        ApplyTls(tls, ctx);  // validated above; a failure here shows up as a failed handshake
      });
    }
    auto client = std::make_shared<RestClient>(config, options, std::move(base));
    return std::shared_ptr<Client>(std::move(client));
  } catch (const std::exception& e) {
    return ApiStatus(Code::kConfig, "server " + config.server + ": " + e.what());
  }
}

}  // namespace fleet::kube

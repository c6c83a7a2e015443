// The Kubernetes API over an HttpTransport (api_client.h), and the Client base class's defaults.
// nlohmann exceptions stop here and come back as ApiStatus values.
#include "api_client.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <thread>

#include "fleet/kube/rate_limiter.h"
#include "packed_json.h"

namespace fleet::kube {

std::string Resource::ApiPrefix() const {
  return group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
}

namespace {

using internal::Clock;
using internal::HttpReply;
using internal::HttpRequest;
using internal::HttpStream;
using internal::HttpTransport;
using internal::kReadChunk;
using internal::Repeat;
using std::chrono::milliseconds;

constexpr std::chrono::minutes kTokenRereadEvery{1};
constexpr std::chrono::seconds kWatchIdleGrace{30};  // beyond timeoutSeconds before a silent watch is dead
constexpr std::chrono::seconds kMaxRetryAfterWait{30};  // longer Retry-Afters go back to the caller

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

StatusOr<WatchEventType> ParseEventType(const std::string& type) {
  if (type == "ADDED") return WatchEventType::kAdded;
  if (type == "MODIFIED") return WatchEventType::kModified;
  if (type == "DELETED") return WatchEventType::kDeleted;
  if (type == "BOOKMARK") return WatchEventType::kBookmark;
  if (type == "ERROR") return WatchEventType::kError;
  return ApiStatus(Code::kMalformed, "watch event of unknown type \"" + type + "\"");
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

class ApiClient final : public Client {
 public:
  ApiClient(ClusterConfig config, ClientOptions options, std::unique_ptr<HttpTransport> transport)
      : config_(std::move(config)),
        options_(std::move(options)),
        tokens_(config_.token, config_.token_file),
        limiter_(options_.qps, options_.burst > 0 ? options_.burst : std::max(1, static_cast<int>(options_.qps))),
        transport_(std::move(transport)) {}

  StatusOr<Json> GetPath(const std::string& path) override {
    if (path.empty() || path[0] != '/') return ApiStatus(Code::kBadRequest, "GetPath: \"" + path + "\" is not an absolute path");
    return CallForObject({"GET", path});
  }

  StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    if (name.empty()) return ApiStatus(Code::kBadRequest, "get of " + r.plural + ": no name given");
    return CallForObject({"GET", ObjectPath(r, Namespace(ns, Json()), name)});
  }

  StatusOr<Json> List(const Resource& r, const std::string& ns, const ListOptions& options) override {
    Json result;
    Json items = Json::array();
    std::string next;
    do {
      const Query query = PageQuery(options, next);
      auto page = CallForObject({"GET", CollectionPath(r, ns) + query.str()});
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
    return CallForObject(CreateRequest(r, ns, object));
  }

  ApiStatus CreateDiscardingReply(const Resource& r, const std::string& ns, const Json& object) override {
    auto reply = Call(CreateRequest(r, ns, object));
    return reply.ok() ? ApiStatus() : reply.status();
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
    HttpRequest request{"PATCH", path, Dump(patch)};
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
    auto reply = Call({"DELETE", ObjectPath(r, Namespace(ns, Json()), name), Dump(body)});
    return reply.ok() ? ApiStatus() : reply.status();
  }

  StatusOr<std::string> GetLog(const std::string& ns, const std::string& pod, const std::string& container,
                               int64_t tail_lines) override {
    Query query;
    query.Add("container", container);
    if (tail_lines >= 0) query.Add("tailLines", std::to_string(tail_lines));
    auto reply = Call({"GET", ObjectPath(Resource::Pods(), Namespace(ns, Json()), pod) + "/log" + query.str()});
    if (!reply.ok()) return reply.status();
    return std::move(reply->body);
  }

  ApiStatus FollowLog(const std::string& ns, const std::string& pod, const std::string& container, int64_t tail_lines,
                      int64_t since_seconds, const std::function<bool(std::string_view text)>& on_text,
                      const CancelToken& cancel) override {
    Query query;
    query.Add("container", container).Add("follow", "true");
    if (tail_lines >= 0) query.Add("tailLines", std::to_string(tail_lines));
    if (since_seconds > 0) query.Add("sinceSeconds", std::to_string(since_seconds));
    const HttpRequest request{"GET", ObjectPath(Resource::Pods(), Namespace(ns, Json()), pod) + "/log" + query.str()};
    const std::string what = "follow " + request.target;
    // A training container may print nothing for a long time; the connection is still checked by
    // TCP, and a day without output ends the stream (the caller may follow again).
    auto opened = OpenStream(request, what, std::chrono::hours(24), cancel);
    if (!opened.ok()) return opened.status();
    std::string chunk;
    for (bool eof = false; !eof;) {
      chunk.clear();
      ApiStatus read = (*opened)->Read(&chunk, 64 << 10, Clock::time_point::max(), &cancel, &eof);
      if (read.code() == Code::kCancelled) return ApiStatus(Code::kCancelled, what + ": cancelled");
      if (!read.ok()) return ApiStatus(read.code(), what + ": " + read.message());
      if (!chunk.empty() && !on_text(chunk)) return ApiStatus();
    }
    return ApiStatus();
  }

  ApiStatus ListPages(const Resource& r, const std::string& ns, const ListOptions& options,
                      const std::function<bool(std::string_view page)>& on_page) override {
    std::string next;
    do {
      const Query query = PageQuery(options, next);
      HttpRequest request{"GET", CollectionPath(r, ns) + query.str()};
      const std::string what = internal::Describe(request);
      auto reply = Call(std::move(request));
      if (!reply.ok()) return reply.status();
      if (ApiStatus s = CheckJsonContentType(what, *reply); !s.ok()) return s;
      // The continue token, and a check of the page, without a DOM (a parse that writes nothing).
      internal::ListBodyInfo info;
      std::string error;
      if (!internal::PackListBody(reply->body, {}, &info, &error)) {
        return ApiStatus(Code::kMalformed, "list " + r.plural + ": " + error + " (" +
                                               std::to_string(reply->body.size()) + " bytes: " +
                                               Excerpt(reply->body) + ")",
                         reply->head.status);
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
                  const std::function<bool(const WatchEvent&)>& on_event, const CancelToken& cancel) override {
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

  ApiStatus WatchLines(const Resource& r, const std::string& ns, const WatchOptions& options,
                       const std::function<bool(std::string_view line)>& on_line, const CancelToken& cancel) override {
    return WatchStream(
        r, ns, options,
        [&on_line](std::string_view line, bool* stop) {
          *stop = !on_line(line);
          return ApiStatus();
        },
        cancel);
  }

 private:
  // What a watch does with one line: OK to go on (*stop to end the watch there), else the status
  // that ends it.
  using LineHandler = std::function<ApiStatus(std::string_view line, bool* stop)>;

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

  HttpRequest CreateRequest(const Resource& r, const std::string& ns, const Json& object) const {
    const Json& meta = Metadata(object);
    const bool generated = !meta.contains("name") && meta.contains("generateName");
    HttpRequest request{"POST", CollectionPath(r, Namespace(ns, object)), Dump(object)};
    request.repeat = generated ? Repeat::kOnlyRejected : Repeat::kAlways;
    return request;
  }

  static std::string ObjectPath(const Resource& r, const std::string& ns, const std::string& name) {
    return CollectionPath(r, ns) + "/" + Escape(name);
  }

  static ApiStatus CheckJsonContentType(const std::string& what, const HttpReply& reply) {
    if (IsJsonContentType(reply.head.content_type)) return ApiStatus();
    return ApiStatus(Code::kMalformed, what + ": answered with Content-Type \"" + reply.head.content_type +
                                           "\", expected application/json",
                     reply.head.status);
  }

  StatusOr<Json> Put(const Resource& r, const std::string& ns, const Json& object, const std::string& sub) {
    const std::string name = MetaString(object, "name");
    if (name.empty()) return ApiStatus(Code::kBadRequest, "update of " + r.plural + ": object has no metadata.name");
    std::string path = ObjectPath(r, Namespace(ns, object), name);
    if (!sub.empty()) path += "/" + sub;
    return CallForObject({"PUT", path, Dump(object)});
  }

  StatusOr<Json> CallForObject(HttpRequest request) {
    const std::string what = internal::Describe(request);
    auto reply = Call(std::move(request));
    if (!reply.ok()) return reply.status();
    if (ApiStatus s = CheckJsonContentType(what, *reply); !s.ok()) return s;
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
                       reply->head.status);
    }
    return json;
  }

  // The request with retries, rate limiting and token refresh. A non-2xx answer becomes its status.
  StatusOr<HttpReply> Call(HttpRequest request) {
    bool token_retried = false;
    for (int attempt = 1;; ++attempt) {
      limiter_.Wait();
      const std::string token = tokens_.Current();
      StatusOr<HttpReply> reply = transport_->RoundTrip(request, token);
      ApiStatus status = reply.ok() ? StatusFromResponse(reply->head.status, reply->body, reply->head.retry_after)
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

  // Splits the watch stream into lines and hands each non-blank one to `on_line`. Returns OK at
  // the end of the stream, or the status that ended the watch; *stop when the handler said so.
  ApiStatus StreamLines(HttpStream& stream, const LineHandler& on_line, const CancelToken& cancel, bool* stop) {
    const size_t limit = options_.max_response_bytes;
    std::string buffer;
    size_t scanned = 0;  // bytes of `buffer` known to hold no newline
    for (bool eof = false; !eof;) {
      ApiStatus status = stream.Read(&buffer, kReadChunk, Clock::time_point::max(), &cancel, &eof);
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

  // Opens the watch (token refresh on 401, status and content type checked) and streams it. The
  // stream closes its connection when it goes out of scope before the end (the handler stopped,
  // failed or threw), since the server may still be sending.
  ApiStatus WatchStream(const Resource& r, const std::string& ns, const WatchOptions& options,
                        const LineHandler& on_line, const CancelToken& cancel) {
    Query query;
    query.Add("watch", "true")
        .Add("resourceVersion", options.resource_version)
        .Add("labelSelector", options.label_selector)
        .Add("fieldSelector", options.field_selector);
    if (options.allow_bookmarks) query.Add("allowWatchBookmarks", "true");
    if (options.timeout_seconds > 0) query.Add("timeoutSeconds", std::to_string(options.timeout_seconds));
    const HttpRequest request{"GET", CollectionPath(r, ns) + query.str()};
    const std::string what = "watch " + request.target;
    // The idle timeout has to outlast the server's timeoutSeconds.
    const auto idle = std::chrono::duration_cast<milliseconds>(
        std::chrono::seconds(options.timeout_seconds > 0 ? options.timeout_seconds : 3600) + kWatchIdleGrace);

    auto opened = OpenStream(request, what, idle, cancel);
    if (!opened.ok()) return opened.status();
    HttpStream& stream = **opened;
    if (!IsJsonContentType(stream.head().content_type)) {
      return ApiStatus(Code::kMalformed,
                       what + ": answered with Content-Type \"" + stream.head().content_type + "\", expected application/json");
    }
    bool stop = false;
    ApiStatus status = StreamLines(stream, on_line, cancel, &stop);
    if (status.code() == Code::kCancelled) return ApiStatus(Code::kCancelled, what + ": cancelled");
    return status;
  }

  // A streamed GET (a watch, a followed log) whose answer is 200; any other answer is its status
  // (a 401 re-reads the token file once and tries again).
  StatusOr<std::unique_ptr<HttpStream>> OpenStream(const HttpRequest& request, const std::string& what,
                                                   milliseconds idle, const CancelToken& cancel) {
    bool token_retried = false;
    while (true) {
      if (cancel.cancelled()) return ApiStatus(Code::kCancelled, what + ": cancelled");
      limiter_.Wait();
      const std::string token = tokens_.Current();
      auto opened = transport_->Open(request, token, Clock::now() + options_.request_timeout, &cancel, idle);
      if (!opened.ok()) return opened.status();
      const internal::HttpHead& head = (*opened)->head();
      if (head.status == 200) return opened;
      auto body = internal::ReadAll(**opened, what, options_.max_response_bytes,
                                    Clock::now() + options_.request_timeout, &cancel);
      if (!body.ok()) return body.status();
      ApiStatus status = StatusFromResponse(head.status, *body, head.retry_after);
      if (status.code() == Code::kUnauthorized && !token_retried && tokens_.ReloadAfterUnauthorized(token)) {
        token_retried = true;
        continue;
      }
      return status.ok() ? ApiStatus(Code::kMalformed, what + ": unexpected HTTP status " + std::to_string(head.status))
                         : status;
    }
  }

  const ClusterConfig config_;
  const ClientOptions options_;
  TokenSource tokens_;
  TokenBucket limiter_;
  const std::unique_ptr<HttpTransport> transport_;
};

}  // namespace

namespace internal {

std::string Describe(const HttpRequest& request) { return request.method + " " + request.target; }

std::optional<std::chrono::seconds> ParseRetryAfter(std::string_view value) {
  if (value.empty() || value.size() > 9 || value.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  return std::chrono::seconds(std::stoll(std::string(value)));
}

ApiStatus TooLarge(const std::string& what, size_t limit, int http_status) {
  return ApiStatus(Code::kMalformed, what + ": the response exceeds the limit of " + std::to_string(limit) + " bytes",
                   http_status);
}

StatusOr<std::string> ReadAll(HttpStream& stream, const std::string& what, size_t limit, Clock::time_point deadline,
                              const CancelToken* cancel) {
  const HttpHead& head = stream.head();
  if (head.content_length && *head.content_length > limit) return TooLarge(what, limit, head.status);
  std::string body;
  for (bool eof = false; !eof;) {
    ApiStatus status = stream.Read(&body, limit + 1 - body.size(), deadline, cancel, &eof);
    if (!status.ok()) return ApiStatus(status.code(), what + ": " + status.message());
    if (body.size() > limit) return TooLarge(what, limit, head.status);
  }
  return body;
}

ApiStatus CheckClientSetup(const ClusterConfig& config, const ClientOptions& options) {
  if (config.server.empty()) return ApiStatus(Code::kConfig, "cluster config has no server");
  if (options.qps < 0 || options.max_attempts < 1 || options.max_response_bytes == 0 ||
      options.request_timeout <= milliseconds(0)) {
    return ApiStatus(Code::kConfig, "client options: qps must be >= 0, max_attempts >= 1, max_response_bytes > 0 "
                                    "and request_timeout > 0");
  }
  return ApiStatus();
}

std::shared_ptr<Client> NewApiClient(ClusterConfig config, ClientOptions options,
                                     std::unique_ptr<HttpTransport> transport) {
  return std::make_shared<ApiClient>(std::move(config), std::move(options), std::move(transport));
}

}  // namespace internal

ApiStatus Client::FollowLog(const std::string& ns, const std::string& pod, const std::string& container,
                            int64_t tail_lines, int64_t, const std::function<bool(std::string_view text)>& on_text,
                            const CancelToken&) {
  auto log = GetLog(ns, pod, container, tail_lines);
  if (!log.ok()) return log.status();
  on_text(*log);
  return ApiStatus();
}

ApiStatus Client::CreateDiscardingReply(const Resource& r, const std::string& ns, const Json& object) {
  auto created = Create(r, ns, object);
  return created.ok() ? ApiStatus() : created.status();
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

}  // namespace fleet::kube

// HTTP status + API Status body -> ApiStatus. The body is parsed leniently: anything that is not a
// Status object keeps the HTTP mapping with an excerpt of the body as the message.
#include "fleet/kube/status.h"
#include "fleet/base/json_read.h"

#include <nlohmann/json.hpp>

namespace fleet::kube {
namespace {

constexpr size_t kExcerptChars = 200;

std::string Excerpt(const std::string& body) {
  std::string out;
  for (char c : body.substr(0, kExcerptChars)) {
    out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (body.size() > kExcerptChars) out += "...";
  return out;
}

Code CodeForHttp(int http_status, const std::string& reason) {
  if (http_status >= 200 && http_status < 300) return Code::kOk;
  switch (http_status) {
    case 400: return Code::kBadRequest;
    case 401: return Code::kUnauthorized;
    case 403: return Code::kForbidden;
    case 404: return Code::kNotFound;
    case 409: return reason == "AlreadyExists" ? Code::kAlreadyExists : Code::kConflict;
    case 410: return Code::kGone;
    case 422: return Code::kInvalid;
    case 429: return Code::kTooManyRequests;
    default: break;
  }
  if (http_status >= 400 && http_status < 500) return Code::kBadRequest;
  if (http_status >= 500 && http_status < 600) return Code::kUnavailable;
  return Code::kMalformed;  // 1xx/3xx or nonsense: not an answer this client understands
}

struct ParsedStatus {
  bool is_status = false;
  int code = 0;
  std::string message;
  std::string reason;
  std::vector<StatusCause> causes;
  std::optional<std::chrono::seconds> retry_after;
};

ParsedStatus ParseStatusBody(const std::string& body) {
  ParsedStatus out;
  nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || StringMember(json, "kind") != "Status") return out;
  out.is_status = true;
  out.message = StringMember(json, "message");
  out.reason = StringMember(json, "reason");
  if (auto code = json.find("code"); code != json.end() && code->is_number_integer()) {
    out.code = code->get<int>();
  }
  auto details = json.find("details");
  if (details == json.end() || !details->is_object()) return out;
  if (auto causes = details->find("causes"); causes != details->end() && causes->is_array()) {
    for (const nlohmann::json& cause : *causes) {
      if (!cause.is_object()) continue;
      // The API's JSON names a cause's type "reason"; accept "type" too, as some servers send it.
      std::string type = StringMember(cause, "reason");
      if (type.empty()) type = StringMember(cause, "type");
      out.causes.push_back({std::move(type), StringMember(cause, "field"), StringMember(cause, "message")});
    }
  }
  if (auto after = details->find("retryAfterSeconds");
      after != details->end() && after->is_number_integer() && after->get<int64_t>() >= 0) {
    out.retry_after = std::chrono::seconds(after->get<int64_t>());
  }
  return out;
}

}  // namespace

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NotFound";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kConflict: return "Conflict";
    case Code::kInvalid: return "Invalid";
    case Code::kGone: return "Gone";
    case Code::kBadRequest: return "BadRequest";
    case Code::kUnauthorized: return "Unauthorized";
    case Code::kForbidden: return "Forbidden";
    case Code::kTooManyRequests: return "TooManyRequests";
    case Code::kUnavailable: return "Unavailable";
    case Code::kMalformed: return "Malformed";
    case Code::kCancelled: return "Cancelled";
    case Code::kConfig: return "Config";
  }
  return "Unknown";
}

std::string ApiStatus::ToString() const {
  if (ok()) return "OK";
  std::string out = std::string(CodeName(code_)) + ": " + message_;
  if (http_status_ != 0) out += " (HTTP " + std::to_string(http_status_) + ")";
  for (const StatusCause& cause : causes_) {
    out += "; " + (cause.field.empty() ? std::string() : cause.field + ": ") + cause.message;
  }
  return out;
}

ApiStatus StatusFromResponse(int http_status, const std::string& body,
                             std::optional<std::chrono::seconds> retry_after) {
  // Success whatever the body says (CodeForHttp): a created pod or a written job is not parsed
  // here as well as by the caller.
  if (http_status >= 200 && http_status < 300) return ApiStatus();
  ParsedStatus parsed;
  try {
    parsed = ParseStatusBody(body);
  } catch (const std::exception&) {
    parsed = ParsedStatus{};  // a body we cannot read is just not a Status
  }
  // A watch ERROR event carries its code only inside the Status object.
  const int effective = http_status != 0 ? http_status : parsed.code;
  const Code code = CodeForHttp(effective, parsed.reason);
  if (code == Code::kOk) return ApiStatus();

  std::string message = parsed.message;
  if (message.empty()) {
    message = "HTTP " + std::to_string(effective);
    if (const std::string excerpt = Excerpt(body); !excerpt.empty()) message += ": " + excerpt;
  }
  ApiStatus status(code, std::move(message), effective);
  status.WithReason(parsed.reason).WithCauses(std::move(parsed.causes));
  if (retry_after) {
    status.WithRetryAfter(*retry_after);
  } else if (parsed.retry_after) {
    status.WithRetryAfter(*parsed.retry_after);
  }
  return status;
}

}  // namespace fleet::kube

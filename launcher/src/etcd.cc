#include "fleet/launcher/etcd.h"

#include <charconv>

#include <nlohmann/json.hpp>

#include "fleet/base/strings.h"
#include "fleet/kube/plain_http.h"

namespace fleet::launcher {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxAnswerBytes = 4u << 20;   // etcd's own default request limit is 1.5 MiB

// int64 fields come as decimal strings (proto3 JSON); absent means 0, and so does anything that is
// not one whole int64.
int64_t Int64Field(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (!it->is_string()) return 0;
  const std::string& text = it->get_ref<const std::string&>();
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() ? value : 0;
}

Result<std::string> BytesField(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return std::string();
  if (!it->is_string()) return Error{std::string(name) + " is not a string"};
  auto decoded = DecodeBase64(it->get<std::string>());
  if (!decoded) return Error{std::string(name) + " is not base64"};
  return *decoded;
}

Result<Json> ParseObject(const std::string& text) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return Error{"the answer is not a JSON object"};
  return json;
}

std::string RangeBody(const std::string& key, const std::optional<std::string>& range_end) {
  Json body = {{"key", EncodeBase64(key)}};
  if (range_end) body["range_end"] = EncodeBase64(*range_end);
  return body.dump();
}

}  // namespace

Result<std::vector<EtcdKeyValue>> ParseRangeAnswer(const std::string& body) {
  FLEET_ASSIGN_OR_RETURN(const Json answer, ParseObject(body));
  const auto kvs = answer.find("kvs");
  if (kvs == answer.end()) return std::vector<EtcdKeyValue>();   // proto3 JSON leaves out an empty list
  if (!kvs->is_array()) return Error{"kvs is not a list"};
  std::vector<EtcdKeyValue> entries;
  for (const Json& kv : *kvs) {
    if (!kv.is_object()) return Error{"an entry of kvs is not an object"};
    EtcdKeyValue entry;
    FLEET_ASSIGN_OR_RETURN(entry.key, BytesField(kv, "key"));
    FLEET_ASSIGN_OR_RETURN(entry.value, BytesField(kv, "value"));
    entry.create_revision = Int64Field(kv, "create_revision");
    entry.lease = Int64Field(kv, "lease");
    entries.push_back(std::move(entry));
  }
  return entries;
}

Result<int64_t> ParseLeaseGrantAnswer(const std::string& body) {
  FLEET_ASSIGN_OR_RETURN(const Json answer, ParseObject(body));
  const int64_t id = Int64Field(answer, "ID");
  if (id == 0) return Error{"no lease ID in the answer"};
  return id;
}

Result<bool> ParseKeepAliveAnswer(const std::string& body) {
  // A stream in gRPC; through the gateway one request gets one {"result": {...}} answer, whose TTL
  // is missing (0) once the lease has expired.
  FLEET_ASSIGN_OR_RETURN(const Json answer, ParseObject(body));
  const auto result = answer.find("result");
  return result != answer.end() && result->is_object() && Int64Field(*result, "TTL") > 0;
}

std::string ShowEtcdBytes(std::string_view bytes) {
  constexpr size_t kShown = 100;
  const std::string head(bytes.substr(0, kShown));
  return Json(head).dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace) +
         (bytes.size() > kShown ? "..." : "");
}

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) return std::string(1, '\0');   // etcd: "\0" means "to the end of the keyspace"
  end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
}

EtcdClient::EtcdClient(std::string server, std::unique_ptr<kube::PlainHttpClient> http)
    : server_(std::move(server)), http_(std::move(http)) {}

EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(const std::string& server, std::chrono::milliseconds timeout) {
  kube::ClientOptions options;
  options.request_timeout = timeout;
  options.max_response_bytes = kMaxAnswerBytes;
  options.user_agent = "fleetrun";
  auto http = kube::PlainHttpClient::Create("http://" + server, options);
  if (!http.ok()) return Error{"etcd server " + server + ": " + http.status().message()};
  return std::unique_ptr<EtcdClient>(new EtcdClient(server, std::move(*http)));
}

Result<std::string> EtcdClient::Call(const std::string& path, const std::string& body, Deadline deadline) {
  const std::string what = "etcd " + server_ + path;
  auto reply = http_->PostJson(path, body, deadline);
  if (!reply.ok()) return Error{what + ": " + reply.status().message()};
  if (reply->status != 200) {
    // The gateway's errors: {"error": "...", "message": "...", "code": <gRPC code>}.
    Json error = Json::parse(reply->body, nullptr, false);
    const bool has_message = error.is_object() && error.value("message", Json()).is_string();
    return Error{what + ": HTTP " + std::to_string(reply->status) + ": " +
                 ShowEtcdBytes(has_message ? error["message"].get_ref<const std::string&>() : reply->body)};
  }
  return std::move(reply->body);
}

Result<std::vector<EtcdKeyValue>> EtcdClient::GetPrefix(const std::string& prefix, Deadline deadline) {
  FLEET_ASSIGN_OR_RETURN(auto text, Call("/v3/kv/range", RangeBody(prefix, PrefixRangeEnd(prefix)), deadline));
  auto kvs = ParseRangeAnswer(text);
  if (!kvs) return Error{"etcd " + server_ + " range: " + kvs.error()};
  return kvs;
}

Result<std::optional<std::string>> EtcdClient::Get(const std::string& key, Deadline deadline) {
  FLEET_ASSIGN_OR_RETURN(auto text, Call("/v3/kv/range", RangeBody(key, std::nullopt), deadline));
  auto kvs = ParseRangeAnswer(text);
  if (!kvs) return Error{"etcd " + server_ + " range: " + kvs.error()};
  if (kvs->empty()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(kvs->front().value));
}

Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease, Deadline deadline) {
  Json body = {{"key", EncodeBase64(key)}, {"value", EncodeBase64(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  FLEET_RETURN_IF_ERROR(Call("/v3/kv/put", body.dump(), deadline));
  return OkStatus();
}

Status EtcdClient::Delete(const std::string& key, Deadline deadline) {
  FLEET_RETURN_IF_ERROR(Call("/v3/kv/deleterange", RangeBody(key, std::nullopt), deadline));
  return OkStatus();
}

Status EtcdClient::DeletePrefix(const std::string& prefix, Deadline deadline) {
  FLEET_RETURN_IF_ERROR(Call("/v3/kv/deleterange", RangeBody(prefix, PrefixRangeEnd(prefix)), deadline));
  return OkStatus();
}

Result<int64_t> EtcdClient::GrantLease(int ttl_seconds, Deadline deadline) {
  FLEET_ASSIGN_OR_RETURN(auto text, Call("/v3/lease/grant", Json({{"TTL", ttl_seconds}}).dump(), deadline));
  auto id = ParseLeaseGrantAnswer(text);
  if (!id) return Error{"etcd " + server_ + " lease grant: " + id.error()};
  return id;
}

Result<bool> EtcdClient::KeepAlive(int64_t lease, Deadline deadline) {
  FLEET_ASSIGN_OR_RETURN(auto text,
                         Call("/v3/lease/keepalive", Json({{"ID", std::to_string(lease)}}).dump(), deadline));
  auto alive = ParseKeepAliveAnswer(text);
  if (!alive) return Error{"etcd " + server_ + " lease keepalive: " + alive.error()};
  return alive;
}

Status EtcdClient::RevokeLease(int64_t lease, Deadline deadline) {
  auto revoked = Call("/v3/lease/revoke", Json({{"ID", std::to_string(lease)}}).dump(), deadline);
  if (!revoked && revoked.error().find("lease not found") == std::string::npos) return Error{revoked.error()};
  return OkStatus();
}

}  // namespace fleet::launcher

#include "fleet/launcher/etcd.h"

#include <nlohmann/json.hpp>

#include "fleet/base/strings.h"
#include "fleet/kube/plain_http.h"

namespace fleet::launcher {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxAnswerBytes = 4u << 20;   // etcd's own default request limit is 1.5 MiB

// int64 fields come as decimal strings (proto3 JSON); absent means 0.
int64_t Int64Field(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (!it->is_string()) return 0;
  try {
    return std::stoll(it->get<std::string>());
  } catch (const std::exception&) {
    return 0;
  }
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

Result<std::string> EtcdClient::Call(const std::string& path, const std::string& body) {
  const std::string what = "etcd " + server_ + path;
  auto reply = http_->PostJson(path, body);
  if (!reply.ok()) return Error{what + ": " + reply.status().message()};
  if (reply->status != 200) {
    // The gateway's errors: {"error": "...", "message": "...", "code": <gRPC code>}.
    Json error = Json::parse(reply->body, nullptr, false);
    std::string message = error.is_object() && error.value("message", Json()).is_string()
                              ? error["message"].get<std::string>()
                              : reply->body.substr(0, 200);
    return Error{what + ": HTTP " + std::to_string(reply->status) + ": " + message};
  }
  return std::move(reply->body);
}

Result<std::vector<EtcdKeyValue>> EtcdClient::GetPrefix(const std::string& prefix) {
  FLEET_ASSIGN_OR_RETURN(auto text, Call("/v3/kv/range", RangeBody(prefix, PrefixRangeEnd(prefix))));
  auto answer = ParseObject(text);
  if (!answer) return Error{"etcd " + server_ + " range: " + answer.error()};
  std::vector<EtcdKeyValue> kvs;
  for (const Json& kv : answer->value("kvs", Json::array())) {
    if (!kv.is_object()) return Error{"etcd " + server_ + " range: an entry of kvs is not an object"};
    EtcdKeyValue entry;
    auto key = BytesField(kv, "key");
    auto value = BytesField(kv, "value");
    if (!key || !value) return Error{"etcd " + server_ + " range: " + (key ? value.error() : key.error())};
    entry.key = std::move(*key);
    entry.value = std::move(*value);
    entry.create_revision = Int64Field(kv, "create_revision");
    entry.lease = Int64Field(kv, "lease");
    kvs.push_back(std::move(entry));
  }
  return kvs;
}

Result<std::optional<std::string>> EtcdClient::Get(const std::string& key) {
  FLEET_ASSIGN_OR_RETURN(auto text, Call("/v3/kv/range", RangeBody(key, std::nullopt)));
  auto answer = ParseObject(text);
  if (!answer) return Error{"etcd " + server_ + " range: " + answer.error()};
  const Json kvs = answer->value("kvs", Json::array());
  if (!kvs.is_array() || kvs.empty() || !kvs[0].is_object()) return std::optional<std::string>();
  auto value = BytesField(kvs[0], "value");
  if (!value) return Error{"etcd " + server_ + " range: " + value.error()};
  return std::optional<std::string>(std::move(*value));
}

Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  Json body = {{"key", EncodeBase64(key)}, {"value", EncodeBase64(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  FLEET_RETURN_IF_ERROR(Call("/v3/kv/put", body.dump()));
  return OkStatus();
}

Status EtcdClient::Delete(const std::string& key) {
  FLEET_RETURN_IF_ERROR(Call("/v3/kv/deleterange", RangeBody(key, std::nullopt)));
  return OkStatus();
}

Status EtcdClient::DeletePrefix(const std::string& prefix) {
  FLEET_RETURN_IF_ERROR(Call("/v3/kv/deleterange", RangeBody(prefix, PrefixRangeEnd(prefix))));
  return OkStatus();
}

Result<int64_t> EtcdClient::GrantLease(int ttl_seconds) {
  FLEET_ASSIGN_OR_RETURN(auto text, Call("/v3/lease/grant", Json({{"TTL", ttl_seconds}}).dump()));
  auto answer = ParseObject(text);
  if (!answer) return Error{"etcd " + server_ + " lease grant: " + answer.error()};
  const int64_t id = Int64Field(*answer, "ID");
  if (id == 0) return Error{"etcd " + server_ + " lease grant: no lease ID in the answer"};
  return id;
}

Result<bool> EtcdClient::KeepAlive(int64_t lease) {
  // A stream in gRPC; through the gateway one request gets one {"result": {...}} answer, whose TTL
  // is missing (0) once the lease has expired.
  FLEET_ASSIGN_OR_RETURN(auto text, Call("/v3/lease/keepalive", Json({{"ID", std::to_string(lease)}}).dump()));
  auto answer = ParseObject(text);
  if (!answer) return Error{"etcd " + server_ + " lease keepalive: " + answer.error()};
  const Json result = answer->value("result", Json::object());
  return result.is_object() && Int64Field(result, "TTL") > 0;
}

Status EtcdClient::RevokeLease(int64_t lease) {
  auto revoked = Call("/v3/lease/revoke", Json({{"ID", std::to_string(lease)}}).dump());
  if (!revoked && revoked.error().find("lease not found") == std::string::npos) return Error{revoked.error()};
  return OkStatus();
}

}  // namespace fleet::launcher

#include "fleet/sidecar/verdict.h"

#include <string_view>

#include "fleet/base/strings.h"

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Values are shown in messages; a garbage value may be long or hold control characters.
std::string Excerpt(const std::string& value) {
  std::string out;
  for (char c : value.substr(0, 200)) {
    const auto byte = static_cast<unsigned char>(c);
    out += byte < 0x20 || byte == 0x7f ? '?' : c;
  }
  return value.size() > 200 ? out + "..." : out;
}

ConfigMapVerdict Verdict(ConfigMapState state, std::string detail) {
  ConfigMapVerdict v;
  v.state = state;
  v.detail = std::move(detail);
  return v;
}

// The variable a data key holds, when the key is for `role`: "VAR" and "VAR.<role>" -> "VAR";
// keys for other roles -> "".
std::string VariableForRole(const std::string& key, const std::string& role) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos) return key;
  return key.substr(dot + 1) == role ? key.substr(0, dot) : std::string();
}

// The object's metadata.annotations, null when it has none (or they are not a map).
const Json* Annotations(const Json* config_map) {
  if (config_map == nullptr || !config_map->is_object()) return nullptr;
  auto metadata = config_map->find("metadata");
  if (metadata == config_map->end() || !metadata->is_object()) return nullptr;
  auto annotations = metadata->find("annotations");
  return annotations != metadata->end() && annotations->is_object() ? &*annotations : nullptr;
}

}  // namespace

RunAnnotations ReadRunAnnotations(const Json* config_map) {
  RunAnnotations out;
  const Json* annotations = Annotations(config_map);
  if (!annotations) return out;
  // The run number in annotation `name`; nullopt when it is absent (*present false) or not one.
  auto read = [annotations](const char* name, bool* present) -> std::optional<int> {
    auto it = annotations->find(name);
    *present = it != annotations->end();
    if (!*present || !it->is_string()) return std::nullopt;
    auto run = ParseNonNegativeInt(it->get_ref<const std::string&>(), name);
    return run ? std::optional<int>(*run) : std::nullopt;
  };
  bool present = false;
  out.run = read(kRunAnnotation, &present);
  out.barrier = read(api::kBarrierAnnotation, &present);
  if (present && !out.barrier) out.barrier = out.run;
  return out;
}

const char* ConfigMapStateName(ConfigMapState state) {
  switch (state) {
    case ConfigMapState::kAbsent: return "absent";
    case ConfigMapState::kOtherRun: return "other-run";
    case ConfigMapState::kMalformed: return "malformed";
    case ConfigMapState::kReady: return "ready";
  }
  return "absent";
}

ConfigMapVerdict EvaluateConfigMap(const Json* config_map, const GateTarget& target) {
  if (config_map == nullptr || config_map->is_null()) {
    return Verdict(ConfigMapState::kAbsent, "it does not exist yet");
  }
  if (!config_map->is_object()) return Verdict(ConfigMapState::kMalformed, "it is not a JSON object");

  // The run it was published for.
  const Json* annotations = Annotations(config_map);
  const auto run_it = annotations ? annotations->find(kRunAnnotation) : Json::const_iterator();
  if (!annotations || run_it == annotations->end()) {
    return Verdict(ConfigMapState::kOtherRun, std::string("it has no ") + kRunAnnotation + " annotation");
  }
  if (!run_it->is_string()) {
    return Verdict(ConfigMapState::kOtherRun, std::string("its ") + kRunAnnotation + " annotation is not a string");
  }
  const std::string run_text = run_it->get<std::string>();
  auto run = ParseNonNegativeInt(run_text, "run");
  if (!run) {
    return Verdict(ConfigMapState::kOtherRun, std::string("its ") + kRunAnnotation + " annotation '" +
                                                  Excerpt(run_text) + "' is not a run number");
  }
  if (*run != target.run) {
    std::string detail = "it holds run " + std::to_string(*run);
    if (*run > target.run) detail += ", newer than this pod's: the operator is replacing this pod";
    return Verdict(ConfigMapState::kOtherRun, detail);
  }

  // The data: a map of strings (absent when there is nothing to share, e.g. a one-pod job).
  Json empty = Json::object();
  const Json* data = &empty;
  auto data_it = config_map->find("data");
  if (data_it != config_map->end() && !data_it->is_null()) {
    if (!data_it->is_object()) return Verdict(ConfigMapState::kMalformed, "its data is not a map");
    data = &*data_it;
  }
  for (auto it = data->begin(); it != data->end(); ++it) {
    const std::string variable = VariableForRole(it.key(), target.role);
    if (variable.empty()) continue;
    if (!it.value().is_string()) {
      return Verdict(ConfigMapState::kMalformed, "data key " + it.key() + " is not a string");
    }
    const std::string& value = it.value().get_ref<const std::string&>();
    if (EndsWith(variable, "_ENDPOINTS") || EndsWith(variable, "_IP_PORT_LIST")) {
      auto list = ParseEndpointList(value);
      if (!list) return Verdict(ConfigMapState::kMalformed, "data key " + it.key() + ": " + Excerpt(list.error()));
    } else if (variable == "PADDLE_GLOO_HTTP_ENDPOINT") {
      auto endpoint = ParseEndpoint(value);
      if (!endpoint) {
        return Verdict(ConfigMapState::kMalformed, "data key " + it.key() + ": " + Excerpt(endpoint.error()));
      }
    }
  }

  ConfigMapVerdict ready = Verdict(ConfigMapState::kReady, "");
  if (target.role == kServerRole || target.mode == "collective") return ready;
  // A trainer: the servers in its list, from the key for its role when there is one.
  const std::string role_key = std::string(kServerListVar) + "." + target.role;
  if (data->contains(role_key)) {
    ready.server_key = role_key;
  } else if (data->contains(kServerListVar)) {
    ready.server_key = kServerListVar;
  } else {
    if (target.mode == "ps" || target.mode == "ps-heter") {
      return Verdict(ConfigMapState::kMalformed, std::string("it has no ") + kServerListVar + " (nor " + role_key +
                                                     ") for this parameter-server trainer");
    }
    return ready;  // collective (or a role the servers' list is not shared with)
  }
  auto servers = ParseEndpointList(data->at(ready.server_key).get_ref<const std::string&>());
  if (!servers) return Verdict(ConfigMapState::kMalformed, "data key " + ready.server_key + ": " + servers.error());
  if (servers->empty()) return Verdict(ConfigMapState::kMalformed, "data key " + ready.server_key + " is empty");
  ready.servers = std::move(*servers);
  return ready;
}

}  // namespace fleet::sidecar

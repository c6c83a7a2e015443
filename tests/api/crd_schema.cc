#include "crd_schema.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "fleet/cli/yaml_json.h"

namespace fleet::api::testing {

using Json = nlohmann::json;

Json CrdSchema(const std::string& member) {
  const char* source = std::getenv("FLEET_SOURCE_DIR");
  std::ifstream file(std::string(source ? source : ".") + "/crds/fleetjob.yaml");
  std::stringstream text;
  text << file.rdbuf();
  auto docs = cli::ParseYamlDocuments(text.str());
  if (!docs || docs->size() != 1) return Json();
  return (*docs)[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][member];
}

void Undeclared(const Json& value, const Json& schema, const std::string& path, std::vector<std::string>& out,
                const std::set<std::string>& opaque) {
  if (value.is_array()) {
    for (const Json& item : value) Undeclared(item, schema.value("items", Json::object()), path + "[]", out, opaque);
    return;
  }
  if (!value.is_object()) return;
  const Json properties = schema.value("properties", Json::object());
  const Json additional = schema.value("additionalProperties", Json());
  for (const auto& [key, member] : value.items()) {
    if (properties.contains(key)) {
      if (!opaque.count(key)) Undeclared(member, properties[key], path + "." + key, out, opaque);
    } else if (additional.is_object()) {
      Undeclared(member, additional, path + "." + key, out, opaque);
    } else {
      out.push_back(path + "." + key);
    }
  }
}

std::set<std::string> DeclaredPaths(const Json& schema, const std::string& path, const std::set<std::string>& opaque) {
  std::set<std::string> out;
  if (!schema.is_object()) return out;
  if (schema.contains("items")) out.merge(DeclaredPaths(schema["items"], path + "[]", opaque));
  const Json properties = schema.value("properties", Json::object());
  for (const auto& [key, property] : properties.items()) {
    out.insert(path + "." + key);
    if (!opaque.count(key)) out.merge(DeclaredPaths(property, path + "." + key, opaque));
  }
  return out;
}

std::set<std::string> WrittenPaths(const Json& value, const std::string& path, const std::set<std::string>& opaque) {
  std::set<std::string> out;
  if (value.is_array()) {
    for (const Json& item : value) out.merge(WrittenPaths(item, path + "[]", opaque));
  } else if (value.is_object()) {
    for (const auto& [key, member] : value.items()) {
      out.insert(path + "." + key);
      if (!opaque.count(key)) out.merge(WrittenPaths(member, path + "." + key, opaque));
    }
  }
  return out;
}

}  // namespace fleet::api::testing

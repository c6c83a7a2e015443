// crds/fleetjob.yaml's schema, read as users' manifests are (fleetctl's YAML reader), and walked:
// the API types' tests check what they write against it.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fleet::api::testing {

// The OpenAPI v3 schema of the FleetJob's `member` ("spec", "status"); null when the CRD cannot
// be read (FLEET_SOURCE_DIR names the source tree).
nlohmann::json CrdSchema(const std::string& member);

// The keys of `value` that `schema` does not declare, as paths under `path`. An object schema that
// lists properties declares those; one with additionalProperties declares any key, each by that
// schema; one that only preserves unknown fields declares nothing below it (a key there would be
// stored but unknown to the API's readers), except below a property named in `opaque` (a pod
// template: Kubernetes' type, not the API's).
void Undeclared(const nlohmann::json& value, const nlohmann::json& schema, const std::string& path,
                std::vector<std::string>& out, const std::set<std::string>& opaque = {});

// Every property `schema` declares, as paths under `path` (an array's items as "path[]"), not
// descending into the properties named in `opaque`.
std::set<std::string> DeclaredPaths(const nlohmann::json& schema, const std::string& path,
                                    const std::set<std::string>& opaque = {});

// Every member path of `value` as DeclaredPaths spells them, not descending into `opaque` members.
std::set<std::string> WrittenPaths(const nlohmann::json& value, const std::string& path,
                                   const std::set<std::string>& opaque = {});

}  // namespace fleet::api::testing

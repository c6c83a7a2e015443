// YAML <-> JSON for fleetctl: manifests in (-f job.yaml) and -o yaml out.
//
// Reading follows Kubernetes (sigs.k8s.io/yaml, YAML 1.1): plain scalars become null (~, null,
// empty), booleans (true/false, yes/no, on/off, y/n in their usual cases), integers (decimal, 0x
// hex, 0o/leading-0 octal, 0b binary), floats, else strings; quoted scalars and !!str stay strings.
// Mapping keys are the text as written (Kubernetes would turn a key "n" or "yes" into "false" or
// "true"; no FleetJob field is named so).
// Writing is block-style YAML that reads back as the same JSON: strings that would read as
// another type are double-quoted.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/base/result.h"

namespace fleet::cli {

using Json = nlohmann::json;

// Every non-empty document of `text`. Errors name the line and column.
Result<std::vector<Json>> ParseYamlDocuments(const std::string& text);

// One document, without a leading "---" and with a trailing newline.
std::string ToYaml(const Json& value);

}  // namespace fleet::cli

#include "fleet/operator/workload_api.h"

#include <string_view>
#include <vector>

#include "fleet/base/json_read.h"
#include "fleet/base/strings.h"
#include "fleet/kube/client.h"

namespace fleet::op {
namespace {

constexpr std::string_view kGroupPath = "/apis/scheduling.k8s.io";

bool Serves(const std::map<std::string, std::set<std::string>>& served, const std::string& version,
            std::initializer_list<const char*> resources) {
  auto it = served.find(version);
  if (it == served.end()) return false;
  for (const char* resource : resources) {
    if (!it->second.count(resource)) return false;
  }
  return true;
}

// "scheduling.k8s.io/v1 (priorityclasses)": each served version and what it lists.
std::string Describe(const std::map<std::string, std::set<std::string>>& served) {
  if (served.empty()) return "no version of scheduling.k8s.io";
  std::vector<std::string> versions;
  for (const auto& [version, resources] : served) {
    versions.push_back("scheduling.k8s.io/" + version + " (" +
                       JoinStrings(std::vector<std::string>(resources.begin(), resources.end()), ", ") + ")");
  }
  return JoinStrings(versions, ", ");
}

}  // namespace

WorkloadApi ChooseWorkloadApi(const std::map<std::string, std::set<std::string>>& resources_by_version) {
  WorkloadApi api;
  api.served = Describe(resources_by_version);
  for (const char* version : {"v1beta1", "v1alpha3", "v1alpha2"}) {
    if (Serves(resources_by_version, version, {"workloads", "podgroups"})) {
      api.version = version;
      api.pod_groups = true;
      return api;
    }
  }
  if (Serves(resources_by_version, "v1alpha1", {"workloads"})) api.version = "v1alpha1";
  return api;
}

std::optional<std::set<std::string>> ServedResources(kube::Client& api, const std::string& group_version_path) {
  auto list = api.GetPath(group_version_path);
  if (!list.ok()) return std::nullopt;
  std::set<std::string> resources;
  for (const nlohmann::json& resource : ArrayMember(*list, "resources")) {
    const std::string& name = StringMember(resource, "name");
    if (!name.empty() && name.find('/') == std::string::npos) resources.insert(name);   // not subresources
  }
  return resources;
}

WorkloadApi DiscoverWorkloadApi(kube::Client& client) {
  std::map<std::string, std::set<std::string>> served;
  auto group = client.GetPath(std::string(kGroupPath));
  if (!group.ok()) {
    // 404: the group is not served at all (it is on every current cluster, for PriorityClasses).
    if (group.status().code() == kube::Code::kNotFound) return ChooseWorkloadApi(served);
    WorkloadApi api;
    api.served = "unknown (discovery failed: " + group.status().ToString() + ")";
    return api;
  }
  for (const nlohmann::json& entry : ArrayMember(*group, "versions")) {
    const std::string& version = StringMember(entry, "version");
    if (version.empty()) continue;
    // Listed but not answering: as good as not served.
    if (auto resources = ServedResources(client, std::string(kGroupPath) + "/" + version)) served[version] = std::move(*resources);
  }
  return ChooseWorkloadApi(served);
}

}  // namespace fleet::op

// The scheduling.k8s.io Workload API (Kubernetes' own gang scheduling, spec.scheduling.gang
// Kubernetes) as the cluster serves it: which version the operator writes. Alpha in Kubernetes
// 1.35 (v1alpha1: a Workload, pods name it and its pod group) and 1.36 (v1alpha2: a Workload of
// pod group templates, a PodGroup per instance, pods name their PodGroup); served only where the
// GenericWorkload feature gate and the group version's runtime-config are on.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

namespace fleet::kube {
class Client;
}

namespace fleet::op {

struct WorkloadApi {
  std::string version;       // "v1alpha2", ...; "" = the cluster serves none the operator can use
  bool pod_groups = false;   // v1alpha2 on: a PodGroup per run that the pods name
  std::string served;        // what the cluster serves of scheduling.k8s.io (for the refusal)

  bool usable() const { return !version.empty(); }
  std::string ApiVersion() const { return "scheduling.k8s.io/" + version; }
  bool operator==(const WorkloadApi& o) const {
    return version == o.version && pod_groups == o.pod_groups && served == o.served;
  }
  bool operator!=(const WorkloadApi& o) const { return !(*this == o); }
};

// The version to use, from the resources each served version of scheduling.k8s.io lists: one
// serving both workloads and podgroups (v1beta1, else v1alpha3, else v1alpha2), else v1alpha1 if it
// serves workloads, else none (`served` says what there is).
WorkloadApi ChooseWorkloadApi(const std::map<std::string, std::set<std::string>>& resources_by_version);

// The resources (not subresources) an API group version serves, from discovery ("/apis/<group>/<version>");
// nullopt when the server does not answer for it (not served).
std::optional<std::set<std::string>> ServedResources(kube::Client& api, const std::string& group_version_path);

// Reads the API server's discovery (/apis/scheduling.k8s.io, then each served version) and
// chooses. A discovery that fails reads as none served, with the error in `served`.
WorkloadApi DiscoverWorkloadApi(kube::Client& api);

}  // namespace fleet::op

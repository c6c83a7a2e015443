#include "fleet/operator/api.h"

namespace fleet::op {

std::string ReplicaSignature(const FleetJobSpec& spec) {
  std::string out;
  for (const RoleSpec& role : spec.roles) out += (out.empty() ? "" : ",") + role.name + "=" + std::to_string(role.replicas);
  return out;
}

std::string RunSignature(const FleetJobSpec& spec) {
  if (!spec.elastic) return ReplicaSignature(spec);
  return "worker=" + std::to_string(spec.elastic->min_replicas) + ":" + std::to_string(spec.elastic->max_replicas) +
         ",etcd=" + spec.elastic->etcd_endpoint;
}

}  // namespace fleet::op

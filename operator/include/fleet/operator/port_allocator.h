// HostPortAllocator: HostNetwork jobs share nodes' port space, so each job gets its own block of
// consecutive host ports (HostPortRangeSize(job) of them) from the operator's range, and no two
// jobs' blocks ever overlap — whichever nodes their pods land on. A job keeps its block for life
// (recorded in status.hostPortBase, so restarts of the operator give it back the same block).
// Thread-safe: reconcile workers of different jobs allocate concurrently.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fleet/base/result.h"

namespace fleet::op {

class HostPortAllocator {
 public:
  // Ports [first_port, last_port] are the operator's to hand out.
  HostPortAllocator(int first_port, int last_port);

  // The block of `job` ("namespace/name"): the one it already holds, else the one recorded in its
  // status (if still free and of the right size), else the lowest free block of `size` ports.
  Result<int> Allocate(const std::string& job, int size, std::optional<int> recorded = std::nullopt);
  // The job is gone (deleted or finished): its block may be reused. Returns the jobs whose
  // Allocate failed since the last release (they may fit now: reconcile them), and forgets them.
  std::vector<std::string> Release(const std::string& job);
  size_t Holders() const;

 private:
  bool FreeLocked(int base, int size, const std::string& except) const;

  const int first_port_;
  const int last_port_;
  mutable std::mutex mu_;
  std::map<std::string, std::pair<int, int>> blocks_;  // job -> (base, size)
  std::set<std::string> waiting_;                       // jobs refused a block
};

}  // namespace fleet::op

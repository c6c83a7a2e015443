#include "fleet/operator/port_allocator.h"

namespace fleet::op {

HostPortAllocator::HostPortAllocator(int first_port, int last_port) : first_port_(first_port), last_port_(last_port) {}

bool HostPortAllocator::FreeLocked(int base, int size, const std::string& except) const {
  if (base < first_port_ || base + size - 1 > last_port_) return false;
  for (const auto& [job, block] : blocks_) {
    if (job == except) continue;
    const auto [other_base, other_size] = block;
    if (base < other_base + other_size && other_base < base + size) return false;
  }
  return true;
}

Result<int> HostPortAllocator::Allocate(const std::string& job, int size, std::optional<int> recorded) {
  if (size < 1) return Error{"a host port block needs at least one port"};
  std::lock_guard<std::mutex> lock(mu_);
  auto held = blocks_.find(job);
  if (held != blocks_.end() && held->second.second == size) return held->second.first;
  waiting_.erase(job);
  if (recorded && FreeLocked(*recorded, size, job)) {
    blocks_[job] = {*recorded, size};
    return *recorded;
  }
  // Lowest fit: walk the gaps between blocks in port order.
  int candidate = first_port_;
  while (candidate + size - 1 <= last_port_) {
    bool moved = false;
    for (const auto& [other, block] : blocks_) {
      if (other == job) continue;
      const auto [other_base, other_size] = block;
      if (candidate < other_base + other_size && other_base < candidate + size) {
        candidate = other_base + other_size;
        moved = true;
      }
    }
    if (!moved) {
      blocks_[job] = {candidate, size};
      return candidate;
    }
  }
  waiting_.insert(job);
  return Error{"no block of " + std::to_string(size) + " free host ports is left in " + std::to_string(first_port_) +
               "-" + std::to_string(last_port_) + "; wait for HostNetwork jobs to finish or widen the operator's range"};
}

std::vector<std::string> HostPortAllocator::Release(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.erase(job);
  if (blocks_.erase(job) == 0) return {};   // nothing freed: whoever waits still does
  std::vector<std::string> woken(waiting_.begin(), waiting_.end());
  waiting_.clear();
  return woken;
}

size_t HostPortAllocator::Holders() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocks_.size();
}

}  // namespace fleet::op

#include "fleet/api/in_place.h"

#include <charconv>

namespace fleet::api {
namespace {

constexpr std::string_view kRunPrefix = "run ";

}  // namespace

const char* TrainerReport::Reason() const {
  switch (state) {
    case TrainerState::kRunning: return "Running";
    case TrainerState::kAtGate: return "AtGate";
    case TrainerState::kExited: return "Exited";
  }
  return "AtGate";
}

std::string TrainerReport::Message(std::string_view detail) const {
  return std::string(kRunPrefix) + std::to_string(run) + ": " + std::string(detail);
}

bool TrainerReport::EndedIn(int r) const {
  return (state == TrainerState::kExited && run == r) || (state == TrainerState::kAtGate && run > r);
}

bool TrainerReport::WaitsFor(int r) const { return state == TrainerState::kAtGate && run <= r; }

std::optional<TrainerReport> TrainerReport::FromCondition(std::string_view reason, std::string_view message) {
  TrainerReport report;
  if (reason == "Running") {
    report.state = TrainerState::kRunning;
  } else if (reason == "AtGate") {
    report.state = TrainerState::kAtGate;
  } else if (reason == "Exited") {
    report.state = TrainerState::kExited;
  } else {
    return std::nullopt;
  }
  if (message.substr(0, kRunPrefix.size()) != kRunPrefix) return std::nullopt;
  message.remove_prefix(kRunPrefix.size());
  const auto [end, error] = std::from_chars(message.data(), message.data() + message.size(), report.run);
  if (error != std::errc() || end == message.data() || message.front() == '-' || message.front() == '+') return std::nullopt;
  if (end != message.data() + message.size() && *end != ':') return std::nullopt;
  return report;
}

}  // namespace fleet::api

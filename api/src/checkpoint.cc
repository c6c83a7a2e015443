#include "fleet/api/checkpoint.h"

#include <charconv>

namespace fleet::api {
namespace {

constexpr std::string_view kStepPrefix = "step ";

// Leading digits of `text` as a step; `used` is how many characters they take.
std::optional<int64_t> LeadingStep(std::string_view text, size_t* used) {
  int64_t step = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), step);
  if (error != std::errc() || end == text.data() || text.front() == '-' || step > kMaxCheckpointStep) return std::nullopt;
  *used = static_cast<size_t>(end - text.data());
  return step;
}

}  // namespace

std::string CheckpointMessage(int64_t step, std::string_view detail) {
  return std::string(kStepPrefix) + std::to_string(step) + " saved by the trainer" + std::string(detail);
}

std::optional<int64_t> CheckpointStepOf(std::string_view message) {
  if (message.substr(0, kStepPrefix.size()) != kStepPrefix) return std::nullopt;
  message.remove_prefix(kStepPrefix.size());
  size_t used = 0;
  const auto step = LeadingStep(message, &used);
  if (!step || (used < message.size() && message[used] != ' ')) return std::nullopt;
  return step;
}

std::optional<int64_t> ParseCheckpointStep(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return std::nullopt;
  text = text.substr(first, text.find_last_not_of(kSpace) - first + 1);
  size_t used = 0;
  const auto step = LeadingStep(text, &used);
  return step && used == text.size() ? step : std::nullopt;
}

}  // namespace fleet::api

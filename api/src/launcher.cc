#include "fleet/api/launcher.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "fleet/base/strings.h"

namespace fleet::api {
namespace {

// Every word of every container's command and args. A shell script (`sh -c "..."`) is one
// argument: splitting at blanks and shell punctuation reads the commands inside it too.
std::vector<std::string> CommandWords(const Json& container) {
  std::vector<std::string> words;
  for (const char* part : {"command", "args"}) {
    const Json list = container.value(part, Json::array());
    if (!list.is_array()) continue;
    for (const Json& arg : list) {
      if (!arg.is_string()) continue;
      std::string word;
      for (char c : arg.get<std::string>()) {
        if (std::isspace(static_cast<unsigned char>(c)) || std::string_view(";&|()'\"`").find(c) != std::string_view::npos) {
          if (!word.empty()) words.push_back(std::move(word));
          word.clear();
        } else {
          word += c;
        }
      }
      if (!word.empty()) words.push_back(std::move(word));
    }
  }
  return words;
}

const Json& Containers(const Json& pod_template) {
  static const Json kNone = Json::array();
  if (!pod_template.is_object()) return kNone;
  const auto spec = pod_template.find("spec");
  if (spec == pod_template.end() || !spec->is_object()) return kNone;
  const auto containers = spec->find("containers");
  return containers != spec->end() && containers->is_array() ? *containers : kNone;
}

std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::optional<Launcher> LauncherOfWord(std::string_view word) {
  if (word.rfind("-m", 0) == 0) word.remove_prefix(2);   // python -mpaddle.distributed.launch
  if (word == "paddle.distributed.launch") return Launcher::kPaddleLaunch;
  if (word == "paddle.distributed.fleet.launch" || BaseName(word) == "fleetrun") return Launcher::kFleetrun;
  if (BaseName(word) == "paddleformers-cli" || word == "paddleformers.cli" || word == "paddleformers.cli.main") {
    return Launcher::kPaddleFormers;
  }
  return std::nullopt;
}

// Reads leading digits of `text` from `pos`; nullopt when there are none (or too many).
std::optional<int> Digits(std::string_view text, size_t& pos) {
  const size_t start = pos;
  int value = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])) && pos - start < 4) {
    value = value * 10 + (text[pos++] - '0');
  }
  if (pos == start) return std::nullopt;
  return value;
}

}  // namespace

std::string_view LauncherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kScript: return "Script";
    case Launcher::kPaddleLaunch: return "PaddleLaunch";
    case Launcher::kFleetrun: return "Fleetrun";
    case Launcher::kPaddleFormers: return "PaddleFormers";
  }
  return "Script";
}

std::string_view LauncherCommand(Launcher launcher) {
  switch (launcher) {
    case Launcher::kScript: return "the training script";
    case Launcher::kPaddleLaunch: return "python -m paddle.distributed.launch";
    case Launcher::kFleetrun: return "fleetrun";
    case Launcher::kPaddleFormers: return "paddleformers-cli";
  }
  return "the training script";
}

bool IsPaddleLaunchFamily(Launcher launcher) {
  return launcher == Launcher::kPaddleLaunch || launcher == Launcher::kPaddleFormers;
}

std::optional<Launcher> DetectLauncher(const Json& pod_template) {
  for (const Json& container : Containers(pod_template)) {
    if (!container.is_object()) continue;
    for (const std::string& word : CommandWords(container)) {
      if (auto launcher = LauncherOfWord(word)) return launcher;
    }
  }
  return std::nullopt;
}

bool PassesFlag(const Json& pod_template, std::string_view flag) {
  const std::string name = "--" + std::string(flag);
  for (const Json& container : Containers(pod_template)) {
    if (!container.is_object()) continue;
    for (const std::string& word : CommandWords(container)) {
      if (word == name || word.rfind(name + "=", 0) == 0) return true;
    }
  }
  return false;
}

int TemplateGpus(const Json& pod_template) {
  const Json& containers = Containers(pod_template);
  if (containers.empty() || !containers[0].is_object()) return 0;
  const Json& limits = containers[0].value("resources", Json::object()).value("limits", Json::object());
  if (!limits.contains("nvidia.com/gpu")) return 0;
  const Json& v = limits["nvidia.com/gpu"];
  if (v.is_number_integer()) return std::max(0, v.get<int>());
  if (v.is_string()) {
    auto n = ParseNonNegativeInt(v.get<std::string>(), "nvidia.com/gpu");
    return n ? *n : 0;
  }
  return 0;
}

std::string PaddleVersion::ToString() const { return std::to_string(major) + "." + std::to_string(minor); }

std::optional<PaddleVersion> ParsePaddleVersion(std::string_view text) {
  size_t pos = 0;
  auto major = Digits(text, pos);
  if (!major || pos >= text.size() || text[pos] != '.') return std::nullopt;
  ++pos;
  auto minor = Digits(text, pos);
  if (!minor) return std::nullopt;
  return PaddleVersion{*major, *minor};
}

std::optional<PaddleVersion> ImagePaddleVersion(const Json& pod_template) {
  const Json& containers = Containers(pod_template);
  if (containers.empty() || !containers[0].is_object()) return std::nullopt;
  const std::string image = containers[0].value("image", "");
  const size_t slash = image.rfind('/');
  const std::string_view name_tag = std::string_view(image).substr(slash == std::string::npos ? 0 : slash + 1);
  const size_t colon = name_tag.find(':');
  if (colon == std::string_view::npos || name_tag.substr(0, colon) != "paddle") return std::nullopt;
  // Only Paddle's own repository: another "paddle" image's tags mean something else.
  const std::string_view repository = std::string_view(image).substr(0, slash == std::string::npos ? 0 : slash);
  if (BaseName(repository) != "paddlepaddle") return std::nullopt;
  return ParsePaddleVersion(name_tag.substr(colon + 1));
}

}  // namespace fleet::api

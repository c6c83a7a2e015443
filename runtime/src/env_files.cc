#include "fleet/runtime/env_files.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "fleet/base/escape.h"
#include "fleet/base/strings.h"

namespace fleet {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kRunFile[] = "fleet-run";

std::string Get(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

// (VAR, FILE) of every FLEET_ENV_FILES entry; an error naming the first that is not VAR=FILE.
Result<std::vector<std::pair<std::string, std::string>>> WantedFiles(const EnvMap& env) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const std::string& entry : SplitString(Get(env, "FLEET_ENV_FILES"), ',')) {
    const size_t equals = entry.find('=');
    if (equals == 0 || equals == std::string::npos || equals + 1 == entry.size()) {
      return Error{"FLEET_ENV_FILES: entry " + Quote(EscapeControl(entry)) + " is not VAR=FILE"};
    }
    files.emplace_back(entry.substr(0, equals), entry.substr(equals + 1));
  }
  return files;
}

// The file's content; nullopt while it is not a readable file (the kubelet may not have written it).
Result<std::optional<std::string>> ReadText(const fs::path& path, const std::string& what) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) return std::optional<std::string>();
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return std::optional<std::string>();
  if (!IsUtf8(text)) return Error{what + ": file " + path.string() + " is not UTF-8 text"};
  return std::optional<std::string>(std::move(text));
}

// The values when every file is there and of `run` (checked before and after), else nullopt.
Result<std::optional<EnvMap>> ReadRun(const fs::path& dir, const std::string& run,
                                      const std::vector<std::pair<std::string, std::string>>& files) {
  FLEET_ASSIGN_OR_RETURN(auto before, ReadText(dir / kRunFile, "FLEET_ENV_FILES_RUN"));
  if (before != run) return std::optional<EnvMap>();
  EnvMap values;
  for (const auto& [name, file] : files) {
    FLEET_ASSIGN_OR_RETURN(auto value, ReadText(dir / file, name));
    if (!value) return std::optional<EnvMap>();
    values[name] = std::move(*value);
  }
  FLEET_ASSIGN_OR_RETURN(auto after, ReadText(dir / kRunFile, "FLEET_ENV_FILES_RUN"));
  if (after != run) return std::optional<EnvMap>();
  return std::optional<EnvMap>(std::move(values));
}

}  // namespace

Result<EnvMap> ReadEnvFiles(const EnvMap& env, const EnvFilesWait& wait) {
  if (Get(env, "FLEET_ENV_FILES").empty()) return EnvMap{};
  FLEET_ASSIGN_OR_RETURN(auto files, WantedFiles(env));
  for (const char* name : {"FLEET_ENV_FILES_DIR", "FLEET_ENV_FILES_RUN"}) {
    if (Get(env, name).empty()) return Error{std::string("FLEET_ENV_FILES is set but ") + name + " is not"};
  }
  const fs::path dir = Get(env, "FLEET_ENV_FILES_DIR");
  const std::string run = Get(env, "FLEET_ENV_FILES_RUN");
  std::vector<std::string> names;
  for (const auto& entry : files) names.push_back(entry.first);
  const std::string what = JoinStrings(names, ", ") + " of run " + run + " in " + dir.string();
  const auto start = Clock::now();
  std::optional<double> reported;
  while (true) {
    FLEET_ASSIGN_OR_RETURN(auto values, ReadRun(dir, run, files));
    if (values) return std::move(*values);
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > wait.timeout_seconds) {
      return Error{"gave up after " + std::to_string(static_cast<long>(waited)) + " s waiting for " + what};
    }
    if (wait.report && (!reported || waited - *reported >= wait.report_every_seconds)) {
      wait.report("waiting for " + what + " (the kubelet refreshes mounted ConfigMaps periodically)");
      reported = waited;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(wait.poll_seconds));
  }
}

EnvMap WithoutEnvFileValues(EnvMap env) {
  auto files = WantedFiles(env);   // malformed: ReadEnvFiles failed, and nothing is passed on
  if (files.ok()) {
    for (const auto& entry : *files) env.erase(entry.first);
  }
  return env;
}

}  // namespace fleet

#include "fleet/launcher/report.h"

#include <algorithm>
#include <set>

namespace fleet::launcher {
namespace {

constexpr size_t kMaxValueWidth = 60;

std::string Center(const std::string& text, size_t width) {
  if (text.size() >= width) return text;
  const size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}

}  // namespace

std::string FormatConfiguration(const LaunchOptions& options) {
  std::string out = "-----------  Configuration Arguments -----------\n";
  for (const auto& [name, value] : options.Describe()) out += name + ": " + value + "\n";
  out += "------------------------------------------------\n";
  return out;
}

std::string FormatEnvTable(const EnvMap& env) {
  const std::vector<std::string> names = ContractVariableOrder(env);
  size_t key_width = std::string("Distributed Envs").size();
  size_t value_width = std::string("Value").size();
  std::vector<std::pair<std::string, std::string>> rows;
  for (const std::string& name : names) {
    std::string value = env.at(name);
    if (value.size() > kMaxValueWidth) value = "..." + value.substr(value.size() - (kMaxValueWidth - 3));
    key_width = std::max(key_width, name.size());
    value_width = std::max(value_width, value.size());
    rows.emplace_back(name, value);
  }
  const size_t inner = key_width + value_width + 8;
  const std::string rule_heavy = "    +" + std::string(inner, '=') + "+\n";
  const std::string rule_light = "    +" + std::string(inner, '-') + "+\n";
  auto row = [&](const std::string& key, const std::string& value) {
    return "    |  " + std::string(key_width - key.size(), ' ') + key + "    " + Center(value, value_width) + "  |\n";
  };
  std::string out = rule_heavy + row("Distributed Envs", "Value") + rule_light;
  for (const auto& [key, value] : rows) out += row(key, value);
  out += rule_heavy;
  return out;
}

std::string FormatPlan(const LaunchPlan& plan) {
  std::string out;
  for (Role role : {Role::kServer, Role::kTrainer, Role::kHeterTrainer}) {
    int count = 0;
    const LocalProcess* first = nullptr;
    for (const LocalProcess& p : plan.processes) {
      if (p.process.role != role) continue;
      if (!first) first = &p;
      ++count;
    }
    if (!first) continue;
    out += "Local " + std::string(RoleTitle(role)) + " start " + std::to_string(count) +
           " processes. First process distributed environment info (Only For Debug):\n";
    out += FormatEnvTable(first->env) + "\n";
  }
  return out;
}

}  // namespace fleet::launcher

#include "fleet/cli/job_spec.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <regex>

#include "fleet/api/job_spec.h"
#include "fleet/base/dns.h"

namespace fleet::cli {
namespace {

std::string Basename(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool IsPython(const std::string& program) {
  static const std::regex kPython("python(3(\\.[0-9]+)?)?");
  return std::regex_match(Basename(program), kPython);
}

// The script of a command: the first argument after the interpreter and its options.
std::string ScriptOf(const std::vector<std::string>& command) {
  if (!IsPython(command[0])) return Basename(command[0]);
  for (size_t i = 1; i < command.size(); ++i) {
    if (command[i] == "-m" && i + 1 < command.size()) return command[i + 1];
    if (command[i].empty() || command[i][0] != '-') return Basename(command[i]);
  }
  return "job";
}

// "train_resnet.py" -> "train-resnet-": a generateName prefix (the server adds 5 characters).
std::string GenerateNamePrefix(const std::vector<std::string>& command) {
  std::string stem = ScriptOf(command);
  for (const char* ext : {".py", ".sh"}) {
    const std::string e = ext;
    if (stem.size() > e.size() && stem.compare(stem.size() - e.size(), e.size(), e) == 0) stem.resize(stem.size() - e.size());
  }
  std::string out;
  for (char c : stem) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9')) {
      out += l;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.size() > 24) out.resize(24);
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty() || !std::isalpha(static_cast<unsigned char>(out[0]))) out = "job" + std::string(out.empty() ? "" : "-") + out;
  return out + "-";
}

// Collective pods with several processes run fleetrun, which starts one process per GPU.
Result<std::vector<std::string>> FleetrunCommand(const std::vector<std::string>& command) {
  if (Basename(command[0]) == "fleetrun") return command;
  if (!IsPython(command[0])) {
    return Error{"--gpus > 1 runs one process per GPU through fleetrun: give the command as "
                 "\"-- python train.py ARGS\" or \"-- fleetrun train.py ARGS\""};
  }
  size_t i = 1;
  while (i < command.size() && command[i] == "-u") ++i;   // fleetrun's children are unbuffered anyway
  if (i >= command.size() || command[i].empty() || command[i][0] == '-') {
    return Error{"--gpus > 1 runs the script through fleetrun, which takes a script, not python's option \"" +
                 (i < command.size() ? command[i] : std::string()) + "\""};
  }
  std::vector<std::string> out = {"fleetrun"};
  out.insert(out.end(), command.begin() + static_cast<long>(i), command.end());
  return out;
}

// The value of `E` that a flag names, as the spec spells it (ignoring case and '-').
template <typename E>
Result<E> OneOf(const std::string& flag, const std::string& value, const api::NameTable<E>& allowed) {
  std::string choices;
  for (const auto& [name, e] : allowed) {
    std::string lower_a(name), lower_v = value;
    std::transform(lower_a.begin(), lower_a.end(), lower_a.begin(), ::tolower);
    std::transform(lower_v.begin(), lower_v.end(), lower_v.begin(), ::tolower);
    lower_v.erase(std::remove(lower_v.begin(), lower_v.end(), '-'), lower_v.end());
    if (lower_a == lower_v) return e;
    choices += (choices.empty() ? "" : ", ") + std::string(name);
  }
  return Error{"--" + flag + "=" + value + ": expected one of " + choices};
}

// An optional flag's value of `E`: unset when the flag is not given.
template <typename E>
Result<std::optional<E>> OptionalOneOf(const std::string& flag, const std::string& value) {
  if (value.empty()) return std::optional<E>();
  FLEET_ASSIGN_OR_RETURN(E e, OneOf(flag, value, api::Names<E>()));
  return std::optional<E>(e);
}

// A role; without a container (null) it has no template (runtime fleet's servers).
Json Role(int replicas, const Json& container, std::optional<api::RestartPolicy> restart_policy) {
  Json role = {{"replicas", replicas}};
  if (!container.is_null()) role["template"] = {{"spec", {{"containers", Json::array({container})}}}};
  if (restart_policy) role["restartPolicy"] = api::NameOf(*restart_policy);
  return role;
}

}  // namespace

Result<Json> BuildFleetJob(const SubmitOptions& o, const std::string& ns) {
  if (o.image.empty()) return Error{"--image is required"};
  if (o.command.empty()) return Error{"the training command is required after \"--\""};
  if (!o.name.empty() && !IsDnsLabel(o.name)) {
    return Error{"--name=" + o.name + ": must be a DNS label (lower case letters, digits and '-', at most 63)"};
  }
  const bool ps = o.server_num > 0;
  FLEET_ASSIGN_OR_RETURN(auto restart_policy, OptionalOneOf<api::RestartPolicy>("restart_policy", o.restart_policy));
  FLEET_ASSIGN_OR_RETURN(auto network, OptionalOneOf<api::Network>("network", o.network));
  FLEET_ASSIGN_OR_RETURN(auto runtime, OptionalOneOf<api::Runtime>("runtime", o.runtime));
  // With runtime fleet the operator provides the servers' fleet-ps-server container; the command
  // is the trainers'.
  const bool fleet_servers = runtime == api::Runtime::kFleet;
  if (fleet_servers && !ps) return Error{"--runtime=fleet serves parameter servers: it needs --server_num > 0"};
  FLEET_ASSIGN_OR_RETURN(auto gang, OptionalOneOf<api::GangScheduler>("gang", o.gang));
  if (!o.queue.empty() && gang != api::GangScheduler::kVolcano) return Error{"--queue needs --gang=Volcano"};

  Json container = {{"name", "paddle"}, {"image", o.image}, {"command", o.command}};
  if (!o.env.empty()) {
    Json env = Json::array();
    for (const auto& [k, v] : o.env) env.push_back({{"name", k}, {"value", v}});
    container["env"] = env;
  }
  Json quantities = Json::object();
  if (!o.cpu.empty()) quantities["cpu"] = o.cpu;
  if (!o.memory.empty()) quantities["memory"] = o.memory;
  if (!quantities.empty()) container["resources"] = {{"requests", quantities}, {"limits", quantities}};

  Json worker = container;
  int processes_per_pod = 1;
  if (o.gpus > 0) {
    Json& limits = worker["resources"]["limits"];
    limits["nvidia.com/gpu"] = o.gpus;
    if (!ps && o.gpus > 1) {
      FLEET_ASSIGN_OR_RETURN(auto command, FleetrunCommand(o.command));
      worker["command"] = command;
      processes_per_pod = o.gpus;
    }
  }

  const JobMode mode = ps ? JobMode::kParameterServer : JobMode::kCollective;
  Json spec = {{"mode", api::NameOf(mode)}, {"worker", Role(o.worker_num, worker, restart_policy)}};
  if (fleet_servers) spec["runtime"] = api::NameOf(*runtime);
  if (ps) spec["server"] = Role(o.server_num, fleet_servers ? Json() : container, restart_policy);
  if (processes_per_pod > 1) spec["processesPerPod"] = processes_per_pod;
  if (network) spec["network"] = api::NameOf(*network);
  if (o.backoff_limit) spec["runPolicy"] = {{"backoffLimit", *o.backoff_limit}};
  if (gang || !o.priority_class.empty()) {
    Json scheduling = Json::object();
    if (gang) scheduling["gang"] = api::NameOf(*gang);
    if (!o.queue.empty()) scheduling["queue"] = o.queue;
    if (!o.priority_class.empty()) scheduling["priorityClassName"] = o.priority_class;
    spec["scheduling"] = scheduling;
  }
  if (!o.sidecar_image.empty()) spec["sidecar"] = {{"image", o.sidecar_image}};

  Json metadata = {{"namespace", ns}};
  if (o.name.empty()) {
    metadata["generateName"] = GenerateNamePrefix(o.command);
  } else {
    metadata["name"] = o.name;
  }
  return Json{{"apiVersion", kFleetJobApiVersion}, {"kind", "FleetJob"}, {"metadata", metadata}, {"spec", spec}};
}

Result<Json> PrepareManifest(std::vector<Json> documents, const std::string& ns, bool ns_given) {
  if (documents.size() != 1) {
    return Error{"expected one FleetJob in the manifest, found " + std::to_string(documents.size()) + " documents"};
  }
  Json job = std::move(documents[0]);
  if (!job.is_object() || job.value("kind", "") != "FleetJob") {
    return Error{"the manifest is not a FleetJob (kind: " + (job.is_object() ? job.value("kind", "<none>") : "<not an object>") + ")"};
  }
  if (job.value("apiVersion", "") != kFleetJobApiVersion) {
    return Error{"apiVersion " + job.value("apiVersion", "<none>") + ": fleetctl submits " + kFleetJobApiVersion};
  }
  Json& meta = job["metadata"];
  if (!meta.is_object()) meta = Json::object();
  if (meta.value("name", "").empty() && meta.value("generateName", "").empty()) {
    return Error{"the FleetJob has no metadata.name"};
  }
  const std::string own = meta.value("namespace", "");
  if (!own.empty() && own != ns && ns_given) {
    return Error{"the FleetJob's namespace \"" + own + "\" does not match the namespace \"" + ns +
                 "\" of -n (drop one of them)"};
  }
  if (own.empty() || ns_given) meta["namespace"] = ns;
  return job;
}

}  // namespace fleet::cli

// ParseProcessEnv reads a process env the way Paddle's PaddleCloudRoleMaker does (_ps_env,
// _collective_env), raising Paddle's own messages, then applies the checks the other Paddle 2.x
// versions make, so that an env accepted here is accepted by all of them.
#include <algorithm>
#include <set>

#include "fleet/base/strings.h"
#include "fleet/runtime/env_contract.h"

namespace fleet {
namespace {

const std::string* Find(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

Error Missing(const std::string& name) {
  return Error{"Can not find " + name + ", please check your environment."};
}

Result<std::string> Require(const EnvMap& env, const std::string& name) {
  const std::string* value = Find(env, name);
  if (!value) return Missing(name);
  return *value;
}

Result<int> RequireInt(const EnvMap& env, const std::string& name) {
  FLEET_ASSIGN_OR_RETURN(auto value, Require(env, name));
  return ParseNonNegativeInt(TrimWhitespace(value), name);
}

// Paddle splits lists on ',' and uses the pieces as they are; every piece must be host:port for
// the sockets Paddle opens with them.
Result<std::vector<std::string>> EndpointList(const std::string& name, const std::string& value) {
  if (value.empty()) return std::vector<std::string>{};
  std::vector<std::string> items = SplitString(value, ',');
  for (const std::string& item : items) {
    if (item != TrimWhitespace(item)) {
      return Error{name + " entry '" + item + "' has surrounding whitespace"};
    }
    if (auto endpoint = ParseEndpoint(item); !endpoint) return Error{name + ": " + endpoint.error()};
  }
  std::set<std::string> distinct(items.begin(), items.end());
  if (distinct.size() != items.size()) return Error{name + " lists an endpoint twice"};
  return items;
}

int CountNodes(const std::vector<std::string>& endpoints) {
  std::set<std::string> hosts;
  for (const std::string& e : endpoints) hosts.insert(e.substr(0, e.find(':')));
  return std::max<int>(1, static_cast<int>(hosts.size()));
}

int IndexOf(const std::vector<std::string>& list, const std::string& item) {
  auto it = std::find(list.begin(), list.end(), item);
  return it == list.end() ? -1 : static_cast<int>(it - list.begin());
}

// Python's list.index() failure, which is what Paddle surfaces when an endpoint is not listed.
Error NotInList(const std::string& item) { return Error{"'" + item + "' is not in list"}; }

// PADDLE_STAGE_TRAINERS_NUM is eval()ed by Paddle; we accept the literal it should be: [a, b, ...].
Result<std::vector<int>> ParseIntListLiteral(const std::string& name, const std::string& text) {
  std::string_view body = TrimWhitespace(text);
  if (body.size() < 2 || body.front() != '[' || body.back() != ']') {
    return Error{name + " must be a Python list of integers such as [2, 2], got '" + text + "'"};
  }
  std::vector<int> values;
  for (const std::string& item : SplitString(body.substr(1, body.size() - 2), ',')) {
    FLEET_ASSIGN_OR_RETURN(auto value, ParseNonNegativeInt(TrimWhitespace(item), name + " item"));
    values.push_back(value);
  }
  return values;
}

Result<std::vector<int>> ParseIntCsv(const std::string& name, const std::string& text) {
  std::vector<int> values;
  if (text.empty()) return values;
  for (const std::string& item : SplitString(text, ',')) {
    FLEET_ASSIGN_OR_RETURN(auto value, ParseNonNegativeInt(item, name + " item"));
    values.push_back(value);
  }
  return values;
}

// Paddle's _gloo_init (static graph) and the HTTP/FILE/HDFS stores it starts.
Status CheckGloo(const EnvMap& env) {
  const std::string* with = Find(env, "PADDLE_WITH_GLOO");
  if (!with) return OkStatus();
  FLEET_ASSIGN_OR_RETURN(auto use_gloo, ParseNonNegativeInt(*with, "PADDLE_WITH_GLOO"));
  if (use_gloo != 1 && use_gloo != 2) return OkStatus();
  const std::string* rendezvous_text = Find(env, "PADDLE_GLOO_RENDEZVOUS");
  auto rendezvous = ParseNonNegativeInt(rendezvous_text ? *rendezvous_text : "0", "PADDLE_GLOO_RENDEZVOUS");
  if (!rendezvous || *rendezvous < 1 || *rendezvous > 3) {
    return Error{"gloo initialized error, please check arguments"};
  }
  auto non_empty = [&](const char* name) -> Status {
    const std::string* v = Find(env, name);
    if (!v || v->empty()) {
      return Error{std::string(name) + " must be set for gloo rendezvous type " +
                   std::to_string(*rendezvous)};
    }
    return OkStatus();
  };
  if (*rendezvous == 1) {
    for (const char* name : {"PADDLE_GLOO_FS_NAME", "PADDLE_GLOO_FS_UGI", "PADDLE_GLOO_FS_PATH"}) {
      if (auto s = non_empty(name); !s) return s;
    }
  } else if (*rendezvous == 2) {
    if (auto s = non_empty("PADDLE_GLOO_FS_PATH"); !s) return s;
  } else if (Find(env, "TRAINING_ROLE")) {  // PS jobs: server 0 hosts the HTTP store
    FLEET_ASSIGN_OR_RETURN(auto http, Require(env, "PADDLE_GLOO_HTTP_ENDPOINT"));
    if (auto e = ParseEndpoint(http); !e) return Error{"PADDLE_GLOO_HTTP_ENDPOINT: " + e.error()};
  }
  return OkStatus();
}

// dygraph init_parallel_env: these must exist, whatever their values. Returns the flag that selects
// the backend's devices ("" for a backend without one).
Result<std::string> CheckParallelEnv(const EnvMap& env, const std::string* backend) {
  std::string device_flag;
  if (!backend || *backend == "nccl" || *backend == "auto") device_flag = "FLAGS_selected_gpus";
  if (backend && *backend == "bkcl") device_flag = "FLAGS_selected_xpus";
  std::vector<std::string> required = {"PADDLE_TRAINER_ID", "PADDLE_CURRENT_ENDPOINT",
                                       "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ENDPOINTS"};
  if (!device_flag.empty()) required.insert(required.begin(), device_flag);
  for (const std::string& name : required) {
    if (!Find(env, name)) {
      return Error{"paddle.distributed initialize error, environment variable " + name +
                   " is needed, but not set."};
    }
  }
  if (backend) {
    static const std::set<std::string> known = {"nccl", "gloo", "bkcl", "auto", "heter", "xccl"};
    if (!known.count(*backend)) {
      return Error{"PADDLE_DISTRI_BACKEND must be one of nccl, gloo, bkcl, auto, heter, xccl; got '" +
                   *backend + "'"};
    }
  }
  return device_flag;
}

// The trainers, and which one this process is.
Status ReadTrainerRank(const EnvMap& env, const std::string& endpoints, ParsedRole& role) {
  FLEET_ASSIGN_OR_RETURN(auto list, EndpointList("PADDLE_TRAINER_ENDPOINTS", endpoints));
  if (list.empty()) return Error{"PADDLE_TRAINER_ENDPOINTS is empty"};
  role.trainer_endpoints = list;
  role.trainers_num = static_cast<int>(list.size());
  role.nodes_num = CountNodes(list);

  FLEET_ASSIGN_OR_RETURN(role.id, RequireInt(env, "PADDLE_TRAINER_ID"));
  FLEET_ASSIGN_OR_RETURN(auto declared, RequireInt(env, "PADDLE_TRAINERS_NUM"));
  if (declared != role.trainers_num) {
    return Error{"PADDLE_TRAINERS_NUM is " + std::to_string(declared) + " but PADDLE_TRAINER_ENDPOINTS lists " +
                 std::to_string(role.trainers_num) + " trainers"};
  }
  role.current_endpoint = *Find(env, "PADDLE_CURRENT_ENDPOINT");
  const int position = IndexOf(role.trainer_endpoints, role.current_endpoint);
  if (position < 0) {
    return Error{"PADDLE_CURRENT_ENDPOINT '" + role.current_endpoint +
                 "' is not in PADDLE_TRAINER_ENDPOINTS"};
  }
  // NCCL's id exchange addresses rank r at endpoints[r]: the id must be the endpoint's position.
  if (position != role.id) {
    return Error{"PADDLE_TRAINER_ID is " + std::to_string(role.id) + " but PADDLE_CURRENT_ENDPOINT '" +
                 role.current_endpoint + "' is entry " + std::to_string(position) +
                 " of PADDLE_TRAINER_ENDPOINTS"};
  }
  return OkStatus();
}

// This trainer's devices (device_flag, "" for none) and the job's.
Status ReadDevices(const EnvMap& env, const std::string& device_flag, const std::string* backend, ParsedRole& role) {
  if (!device_flag.empty()) {
    FLEET_ASSIGN_OR_RETURN(auto devices, ParseIntCsv(device_flag, *Find(env, device_flag)));
    if (devices.empty()) return Error{device_flag + " is empty for a " + (backend ? *backend : "nccl") + " job"};
    role.selected_devices = devices;
    const std::string* local_ids = Find(env, "PADDLE_LOCAL_DEVICE_IDS");
    if (local_ids && *local_ids != *Find(env, device_flag)) {
      return Error{"PADDLE_LOCAL_DEVICE_IDS '" + *local_ids + "' differs from " + device_flag +
                   " '" + *Find(env, device_flag) + "'"};
    }
  }
  if (const std::string* world = Find(env, "PADDLE_WORLD_DEVICE_IDS")) {
    if (SplitString(*world, ',').size() != static_cast<size_t>(role.trainers_num)) {
      return Error{"PADDLE_WORLD_DEVICE_IDS must have one entry per trainer (" +
                   std::to_string(role.trainers_num) + "), got '" + *world + "'"};
    }
  }
  return OkStatus();
}

// `name`, when set, must be `expected`.
Status CheckSameInt(const EnvMap& env, const char* name, int expected) {
  const std::string* value = Find(env, name);
  if (!value) return OkStatus();
  FLEET_ASSIGN_OR_RETURN(auto parsed, ParseNonNegativeInt(*value, name));
  if (parsed != expected) {
    return Error{std::string(name) + " is " + *value + " but should be " + std::to_string(expected)};
  }
  return OkStatus();
}

// The 2.3+ launcher's names, when present, must tell the same story.
Status CheckLauncherRanks(const EnvMap& env, const ParsedRole& role) {
  FLEET_RETURN_IF_ERROR(CheckSameInt(env, "PADDLE_GLOBAL_SIZE", role.trainers_num));
  FLEET_RETURN_IF_ERROR(CheckSameInt(env, "PADDLE_GLOBAL_RANK", role.id));
  if (const std::string* in_node = Find(env, "PADDLE_RANK_IN_NODE")) {
    FLEET_ASSIGN_OR_RETURN(auto local, ParseNonNegativeInt(*in_node, "PADDLE_RANK_IN_NODE"));
    FLEET_RETURN_IF_ERROR(CheckSameInt(env, "PADDLE_LOCAL_RANK", local));
    if (const std::string* size = Find(env, "PADDLE_LOCAL_SIZE")) {
      FLEET_ASSIGN_OR_RETURN(auto local_size, ParseNonNegativeInt(*size, "PADDLE_LOCAL_SIZE"));
      if (local >= local_size) {
        return Error{"PADDLE_RANK_IN_NODE " + *in_node + " is not below PADDLE_LOCAL_SIZE " + *size};
      }
    }
  }
  return OkStatus();
}

Result<ParsedRole> ParseCollective(const EnvMap& env) {
  ParsedRole role;
  role.role = Role::kTrainer;
  const std::string* training_role = Find(env, "PADDLE_TRAINING_ROLE");
  if (training_role && *training_role != "TRAINER") {
    return Error{"PADDLE_TRAINING_ROLE must be TRAINER for a collective job, got '" +
                 *training_role + "'"};
  }
  const std::string* endpoints = Find(env, "PADDLE_TRAINER_ENDPOINTS");
  if (!endpoints) {  // Paddle falls back to one local, non-distributed process
    role.non_distributed = true;
    role.trainer_endpoints = {"127.0.0.1:6170"};
    role.current_endpoint = role.trainer_endpoints[0];
    return role;
  }
  const std::string* backend = Find(env, "PADDLE_DISTRI_BACKEND");
  FLEET_ASSIGN_OR_RETURN(auto device_flag, CheckParallelEnv(env, backend));
  FLEET_RETURN_IF_ERROR(ReadTrainerRank(env, *endpoints, role));
  FLEET_RETURN_IF_ERROR(ReadDevices(env, device_flag, backend, role));
  FLEET_RETURN_IF_ERROR(CheckLauncherRanks(env, role));
  FLEET_RETURN_IF_ERROR(CheckGloo(env));
  return role;
}

Result<Role> ParseTrainingRole(const EnvMap& env) {
  const std::string* training_role = Find(env, "TRAINING_ROLE");
  if (!training_role) return Missing("TRAINING_ROLE");
  if (*training_role == "TRAINER") return Role::kTrainer;
  if (*training_role == "PSERVER") return Role::kServer;
  if (*training_role == "HETER_TRAINER") return Role::kHeterTrainer;
  return Error{"TRAINING_ROLE must be PSERVER or TRAINER or HETER_TRAINER, but get " +
               *training_role + ", please check your environment."};
}

// Heter mode's lists: every heter trainer, and this stage's neighbours.
Status ReadHeterLists(const EnvMap& env, const std::string& all_heter, ParsedRole& role) {
  FLEET_ASSIGN_OR_RETURN(role.heter_endpoints, EndpointList("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", all_heter));
  const std::string* previous = Find(env, "PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST");
  const std::string* next = Find(env, "PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST");
  if (!previous || previous->empty()) {
    if (role.role == Role::kHeterTrainer) return Error{"training_role should be trainer or pserver"};
  } else {
    FLEET_ASSIGN_OR_RETURN(role.previous_stage_endpoints,
                           EndpointList("PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST", *previous));
  }
  if (!next || next->empty()) {
    if (role.role == Role::kTrainer) return Error{"training_role should be heter trainer or pserver"};
  } else {
    FLEET_ASSIGN_OR_RETURN(role.next_stage_endpoints, EndpointList("PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", *next));
  }
  // Paddle 2.0/2.1 turn heter mode on only through the older list.
  const std::string* legacy = Find(env, "PADDLE_HETER_TRAINER_IP_PORT_LIST");
  if (!legacy || *legacy != all_heter) {
    return Error{"PADDLE_HETER_TRAINER_IP_PORT_LIST must equal PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST "
                 "(Paddle 2.0/2.1 read heter workers from it)"};
  }
  return OkStatus();
}

// Heter mode's pipeline stages, and this process's.
Status ReadStages(const EnvMap& env, ParsedRole& role) {
  FLEET_ASSIGN_OR_RETURN(auto stage_id, RequireInt(env, "STAGE_ID"));
  FLEET_ASSIGN_OR_RETURN(auto stage_num, RequireInt(env, "STAGE_NUM"));
  FLEET_ASSIGN_OR_RETURN(auto stage_trainers, Require(env, "PADDLE_STAGE_TRAINERS_NUM"));
  FLEET_ASSIGN_OR_RETURN(auto counts, ParseIntListLiteral("PADDLE_STAGE_TRAINERS_NUM", stage_trainers));
  role.stage_id = stage_id;
  role.stage_num = stage_num;
  role.stage_trainers = counts;
  if (role.stage_id < 1 || role.stage_id > role.stage_num) {
    return Error{"STAGE_ID " + std::to_string(role.stage_id) + " is outside 1.." + std::to_string(role.stage_num)};
  }
  if (static_cast<int>(role.stage_trainers.size()) != role.stage_num) {
    return Error{"PADDLE_STAGE_TRAINERS_NUM has " + std::to_string(role.stage_trainers.size()) +
                 " stages but STAGE_NUM is " + std::to_string(role.stage_num)};
  }
  if (role.stage_trainers[0] != role.trainers_num) {
    return Error{"PADDLE_STAGE_TRAINERS_NUM[0] must be the trainer count " + std::to_string(role.trainers_num)};
  }
  const bool last = role.stage_id == role.stage_num;
  if (last != role.next_stage_endpoints.empty()) {
    return Error{last ? "the last stage must have an empty PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST"
                      : "PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST is empty before the last stage"};
  }
  return OkStatus();
}

// POD_IP:PADDLE_PORT, where a PS-mode process serves or trains.
Status ReadOwnEndpoint(const EnvMap& env, ParsedRole& role) {
  FLEET_ASSIGN_OR_RETURN(auto port, Require(env, "PADDLE_PORT"));
  FLEET_ASSIGN_OR_RETURN(auto ip, Require(env, "POD_IP"));
  role.current_endpoint = ip + ":" + port;
  if (auto e = ParseEndpoint(role.current_endpoint); !e) return Error{"POD_IP:PADDLE_PORT: " + e.error()};
  return OkStatus();
}

Status ReadPsTrainer(const EnvMap& env, bool heter_mode, ParsedRole& role) {
  FLEET_ASSIGN_OR_RETURN(role.id, RequireInt(env, "PADDLE_TRAINER_ID"));
  if (heter_mode) {
    FLEET_RETURN_IF_ERROR(ReadStages(env, role));
    if (role.stage_id != 1) return Error{"a TRAINER is stage 1, but STAGE_ID is " + std::to_string(role.stage_id)};
  }
  FLEET_RETURN_IF_ERROR(ReadOwnEndpoint(env, role));
  if (role.id >= role.trainers_num) {
    return Error{"PADDLE_TRAINER_ID " + std::to_string(role.id) + " is not below PADDLE_TRAINERS_NUM " +
                 std::to_string(role.trainers_num)};
  }
  // Paddle 2.0/2.1 take PADDLE_TRAINER_ENDPOINTS[id] as this trainer's own endpoint.
  if (!role.trainer_endpoints.empty()) {
    if (static_cast<int>(role.trainer_endpoints.size()) != role.trainers_num) {
      return Error{"PADDLE_TRAINER_ENDPOINTS lists " + std::to_string(role.trainer_endpoints.size()) +
                   " trainers but PADDLE_TRAINERS_NUM is " + std::to_string(role.trainers_num)};
    }
    const std::string& listed = role.trainer_endpoints[static_cast<size_t>(role.id)];
    if (listed != role.current_endpoint) {
      return Error{"PADDLE_TRAINER_ENDPOINTS[" + std::to_string(role.id) + "] is '" + listed +
                   "' but this trainer is POD_IP:PADDLE_PORT '" + role.current_endpoint + "'"};
    }
  }
  return OkStatus();
}

Status ReadPsServer(const EnvMap& env, ParsedRole& role) {
  FLEET_RETURN_IF_ERROR(ReadOwnEndpoint(env, role));
  role.id = IndexOf(role.server_endpoints, role.current_endpoint);
  if (role.id < 0) return NotInList(role.current_endpoint);
  return OkStatus();
}

Status ReadHeterTrainer(const EnvMap& env, ParsedRole& role) {
  FLEET_RETURN_IF_ERROR(ReadStages(env, role));
  FLEET_ASSIGN_OR_RETURN(auto device, Require(env, "HETER_DEVICE_TYPE"));
  if (device != "cpu" && device != "gpu" && device != "xpu") {
    return Error{"HETER_DEVICE_TYPE should be cpu,gpu or xpu"};
  }
  role.heter_device_type = device;
  FLEET_RETURN_IF_ERROR(ReadOwnEndpoint(env, role));
  const int position = IndexOf(role.heter_endpoints, role.current_endpoint);
  if (position < 0) return NotInList(role.current_endpoint);
  role.id = position + role.trainers_num;
  if (role.stage_id < 2) return Error{"a HETER_TRAINER is stage 2 or later, but STAGE_ID is " + std::to_string(role.stage_id)};
  const char* flag = device == "xpu" ? "FLAGS_selected_xpus" : "FLAGS_selected_gpus";
  if (device != "cpu") {
    FLEET_ASSIGN_OR_RETURN(role.selected_devices, ParseIntCsv(flag, Find(env, flag) ? *Find(env, flag) : "0"));
  }
  return OkStatus();
}

Result<ParsedRole> ParsePs(const EnvMap& env) {
  ParsedRole role;
  const std::string* servers = Find(env, "PADDLE_PSERVERS_IP_PORT_LIST");
  if (!servers) {  // Paddle falls back to one local, non-distributed worker
    role.non_distributed = true;
    return role;
  }
  FLEET_ASSIGN_OR_RETURN(auto server_list, EndpointList("PADDLE_PSERVERS_IP_PORT_LIST", *servers));
  if (server_list.empty()) return Error{"PADDLE_PSERVERS_IP_PORT_LIST is empty"};
  role.server_endpoints = server_list;
  if (const std::string* workers = Find(env, "PADDLE_TRAINER_ENDPOINTS")) {
    FLEET_ASSIGN_OR_RETURN(role.trainer_endpoints, EndpointList("PADDLE_TRAINER_ENDPOINTS", *workers));
  }
  FLEET_ASSIGN_OR_RETURN(role.trainers_num, RequireInt(env, "PADDLE_TRAINERS_NUM"));
  FLEET_ASSIGN_OR_RETURN(role.role, ParseTrainingRole(env));
  const std::string* all_heter = Find(env, "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST");
  const bool heter_mode = all_heter && !all_heter->empty();
  if (heter_mode) FLEET_RETURN_IF_ERROR(ReadHeterLists(env, *all_heter, role));
  if (role.role == Role::kTrainer) {
    FLEET_RETURN_IF_ERROR(ReadPsTrainer(env, heter_mode, role));
  } else if (role.role == Role::kServer) {
    FLEET_RETURN_IF_ERROR(ReadPsServer(env, role));
  } else {
    FLEET_RETURN_IF_ERROR(ReadHeterTrainer(env, role));
  }
  role.nodes_num = CountNodes(role.trainer_endpoints);
  FLEET_RETURN_IF_ERROR(CheckGloo(env));
  return role;
}

}  // namespace

Result<ParsedRole> ParseProcessEnv(const EnvMap& env, RoleMakerKind kind) {
  return kind == RoleMakerKind::kCollective ? ParseCollective(env) : ParsePs(env);
}

}  // namespace fleet

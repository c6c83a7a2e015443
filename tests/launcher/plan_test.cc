// PlanLaunch against a fake host: which processes run here, with which env, argv, logs and ports.
// Every planned env must pass fleet::ParseProcessEnv the way Paddle's role maker reads it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fleet/launcher/flags.h"
#include "fleet/launcher/plan.h"
#include "fleet/launcher/report.h"
#include "fleet/runtime/env_contract.h"

namespace fleet::launcher {
namespace {

using ::testing::HasSubstr;

constexpr char kGlooDir[] = "/tmp/fleetrun-test-gloo";
constexpr int kFirstFreePort = 40000;

const std::vector<std::string>& DefaultAddresses() {
  static const std::vector<std::string> addresses = {"127.0.0.1", "192.168.7.7", "node-a", "localhost"};
  return addresses;
}

// A host with a fixed env, fixed addresses, `gpu_count` GPUs (when CUDA_VISIBLE_DEVICES is unset) and
// free ports 40000, 40001, ... handed out in order across calls. Programs: train.py and run.sh exist
// (run.sh resolves to /opt/job/run.sh); anything else is missing.
struct FakeHost {
  EnvMap env;
  std::vector<std::string> addresses = DefaultAddresses();
  int gpu_count = 0;

  HostFacts Facts() const {
    HostFacts facts;
    facts.env = env;
    facts.local_addresses = addresses;
    facts.gpu_count = gpu_count;
    auto next = std::make_shared<int>(kFirstFreePort);
    facts.free_ports = [next](int count) -> Result<std::vector<int>> {
      std::vector<int> ports;
      for (int i = 0; i < count; ++i) ports.push_back((*next)++);
      return ports;
    };
    facts.resolve_program = [](const std::string& script) -> Result<std::string> {
      if (script == "train.py") return std::string("train.py");
      if (script == "run.sh") return std::string("/opt/job/run.sh");
      return Error{"training script '" + script + "' does not exist or is not a readable file"};
    };
    facts.gloo_dir = kGlooDir;
    return facts;
  }
};

Result<LaunchPlan> Plan(const std::vector<std::string>& args, const HostFacts& facts) {
  auto options = ParseFlags(args);
  if (!options) return Error{"ParseFlags: " + options.error()};
  return PlanLaunch(*options, facts);
}

EnvMap Overlay(const EnvMap& base, const EnvMap& top) {
  EnvMap out = base;
  for (const auto& [name, value] : top) out[name] = value;
  return out;
}

std::string RoleText(Role role) {
  switch (role) {
    case Role::kTrainer: return "trainer";
    case Role::kServer: return "server";
    case Role::kHeterTrainer: return "heter";
  }
  return "?";
}

// One expected local process. `env` entries must be present with that value, `absent` names unset.
struct Want {
  Role role = Role::kTrainer;
  int rank = 0;
  int local_rank = 0;
  std::string endpoint;  // empty: not checked (direct start has no endpoint)
  std::string log_file;
  bool echo = false;
  EnvMap env;
  std::vector<std::string> absent;
};

Want Coll(int rank, int local, const std::string& endpoint, const std::string& gpus) {
  Want w;
  w.role = Role::kTrainer;
  w.rank = rank;
  w.local_rank = local;
  w.endpoint = endpoint;
  w.log_file = "workerlog." + std::to_string(local);
  w.echo = local == 0;
  w.env = {{"PADDLE_TRAINER_ID", std::to_string(rank)},
           {"PADDLE_CURRENT_ENDPOINT", endpoint},
           {"PADDLE_RANK_IN_NODE", std::to_string(local)},
           {"PADDLE_GLOBAL_RANK", std::to_string(rank)},
           {"PADDLE_LOCAL_RANK", std::to_string(local)},
           {"PADDLE_LOCAL_DEVICE_IDS", gpus}};
  if (gpus.empty()) {
    w.absent = {"FLAGS_selected_gpus", "FLAGS_selected_accelerators", "CUDA_VISIBLE_DEVICES"};
  } else {
    w.env["FLAGS_selected_gpus"] = gpus;
    w.env["FLAGS_selected_accelerators"] = gpus;
    w.absent = {"CUDA_VISIBLE_DEVICES"};  // positions refer to the inherited list, which must stand
  }
  w.absent.push_back("TRAINING_ROLE");
  return w;
}

std::pair<std::string, std::string> HostPort(const std::string& endpoint) {
  const size_t colon = endpoint.find(':');
  return {endpoint.substr(0, colon), endpoint.substr(colon + 1)};
}

Want Server(int rank, int local, const std::string& endpoint) {
  Want w;
  w.role = Role::kServer;
  w.rank = rank;
  w.local_rank = local;
  w.endpoint = endpoint;
  w.log_file = "serverlog." + std::to_string(local);
  w.echo = false;
  w.env = {{"TRAINING_ROLE", "PSERVER"}, {"POD_IP", HostPort(endpoint).first}, {"PADDLE_PORT", HostPort(endpoint).second}};
  w.absent = {"PADDLE_TRAINER_ID", "FLAGS_selected_gpus"};
  return w;
}

Want Trainer(int rank, int local, const std::string& endpoint) {
  Want w;
  w.role = Role::kTrainer;
  w.rank = rank;
  w.local_rank = local;
  w.endpoint = endpoint;
  w.log_file = "workerlog." + std::to_string(local);
  w.echo = local == 0;
  w.env = {{"TRAINING_ROLE", "TRAINER"},
           {"PADDLE_TRAINER_ID", std::to_string(rank)},
           {"POD_IP", HostPort(endpoint).first},
           {"PADDLE_PORT", HostPort(endpoint).second}};
  return w;
}

Want Heter(int rank, int local, const std::string& endpoint, int stage, const std::string& device,
           const std::string& previous, const std::string& next) {
  Want w;
  w.role = Role::kHeterTrainer;
  w.rank = rank;
  w.local_rank = local;
  w.endpoint = endpoint;
  w.log_file = "heterlog." + std::to_string(local);
  w.echo = false;
  w.env = {{"TRAINING_ROLE", "HETER_TRAINER"},
           {"POD_IP", HostPort(endpoint).first},
           {"PADDLE_PORT", HostPort(endpoint).second},
           {"STAGE_ID", std::to_string(stage)},
           {"HETER_DEVICE_TYPE", device},
           {"PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST", previous},
           {"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", next}};
  w.absent = {"PADDLE_TRAINER_ID"};
  return w;
}

Want With(Want w, const EnvMap& extra, const std::vector<std::string>& absent = {}) {
  for (const auto& [name, value] : extra) w.env[name] = value;
  for (const std::string& name : absent) w.absent.push_back(name);
  return w;
}

struct PlanCase {
  PlanCase(std::string case_name, std::vector<std::string> case_args, FakeHost case_host)
      : name(std::move(case_name)), args(std::move(case_args)), host(std::move(case_host)) {}
  std::string name;
  std::vector<std::string> args;
  FakeHost host;
  JobMode mode = JobMode::kCollective;
  int node_rank = 0;
  int topology_size = 0;  // processes in the whole job
  EnvMap common;          // in every local process's env
  std::vector<Want> local;
  std::string endpoints_log;         // exact content; empty: not checked
  std::vector<std::string> argv;     // empty: {"python3", "-u", "train.py"}
  std::string note;                  // a substring of one plan note; empty: not checked
  bool direct_start = false;
};

FakeHost Host(EnvMap env = {}, int gpus = 0, std::vector<std::string> addresses = DefaultAddresses()) {
  FakeHost h;
  h.env = std::move(env);
  h.gpu_count = gpus;
  h.addresses = std::move(addresses);
  return h;
}

EnvMap CollectiveCommon(int world, const std::string& endpoints, int local_size, int nnodes,
                        const std::string& world_devices, bool gpu) {
  return {{"PADDLE_TRAINERS_NUM", std::to_string(world)},
          {"PADDLE_TRAINER_ENDPOINTS", endpoints},
          {"PADDLE_GLOBAL_SIZE", std::to_string(world)},
          {"PADDLE_LOCAL_SIZE", std::to_string(local_size)},
          {"PADDLE_NNODES", std::to_string(nnodes)},
          {"PADDLE_WORLD_DEVICE_IDS", world_devices},
          {"PADDLE_DISTRI_BACKEND", gpu ? "nccl" : "gloo"},
          {"PADDLE_WITH_GLOO", "0"},
          {"PADDLE_GLOO_RENDEZVOUS", "3"},
          {"PADDLE_GLOO_FS_PATH", kGlooDir}};
}

const EnvMap& ClusterEnvNode1() {
  static const EnvMap env = {{"PADDLE_TRAINERS", "10.1.0.1,10.1.0.2"},
                             {"POD_IP", "10.1.0.2"},
                             {"PADDLE_TRAINER_ID", "1"},
                             {"TRAINER_PORTS_NUM", "2"},
                             {"PADDLE_TRAINERS_NUM", "2"}};
  return env;
}

EnvMap Plus(EnvMap env, const EnvMap& extra) {
  for (const auto& [name, value] : extra) env[name] = value;
  return env;
}

std::vector<PlanCase> PlanCases() {
  std::vector<PlanCase> cases;
  const std::string L = "127.0.0.1:";
  {
    PlanCase c{"collective_cpu_default_one_process", {"train.py"}, Host()};
    c.topology_size = 1;
    c.common = CollectiveCommon(1, L + "40000", 1, 1, "", false);
    c.local = {Coll(0, 0, L + "40000", "")};
    c.endpoints_log = "PADDLE_TRAINER_ENDPOINTS: \n127.0.0.1:40000\n";
    cases.push_back(c);
  }
  {
    PlanCase c{"collective_cpu_nproc4_space_form_with_script_args",
               {"--nproc_per_node", "4", "train.py", "--epochs", "2", "--gpus=7"}, Host()};
    c.topology_size = 4;
    const std::string eps = L + "40000," + L + "40001," + L + "40002," + L + "40003";
    c.common = CollectiveCommon(4, eps, 4, 1, ",,,", false);
    c.local = {Coll(0, 0, L + "40000", ""), Coll(1, 1, L + "40001", ""), Coll(2, 2, L + "40002", ""),
               Coll(3, 3, L + "40003", "")};
    c.endpoints_log = "PADDLE_TRAINER_ENDPOINTS: \n127.0.0.1:40000\n127.0.0.1:40001\n127.0.0.1:40002\n127.0.0.1:40003\n";
    c.argv = {"python3", "-u", "train.py", "--epochs", "2", "--gpus=7"};
    cases.push_back(c);
  }
  {
    PlanCase c{"collective_gpus_flag_on_a_cpu_only_host_runs_on_cpu", {"--gpus=0", "train.py"}, Host()};
    c.topology_size = 1;
    c.common = CollectiveCommon(1, L + "40000", 1, 1, "", false);
    c.local = {Coll(0, 0, L + "40000", "")};
    c.note = "no GPU is visible here (none found): --gpus=0 is ignored and the job runs on CPU";
    cases.push_back(c);
  }
  {
    PlanCase c{"collective_gpus_flag_with_empty_cuda_visible_devices_runs_on_cpu", {"--gpus=1", "train.py"},
               Host({{"CUDA_VISIBLE_DEVICES", ""}}, 8)};
    c.topology_size = 1;
    c.common = CollectiveCommon(1, L + "40000", 1, 1, "", false);
    c.local = {Coll(0, 0, L + "40000", "")};
    c.note = "CUDA_VISIBLE_DEVICES is empty";
    cases.push_back(c);
  }
  {
    // CUDA_VISIBLE_DEVICES set but empty: no GPUs visible, whatever the hardware has.
    PlanCase c{"collective_empty_cuda_visible_devices_is_cpu", {"train.py"}, Host({{"CUDA_VISIBLE_DEVICES", ""}}, 8)};
    c.topology_size = 1;
    c.common = CollectiveCommon(1, L + "40000", 1, 1, "", false);
    c.local = {Coll(0, 0, L + "40000", "")};
    cases.push_back(c);
  }
  {
    PlanCase c{"collective_gpus_are_positions_in_cuda_visible_devices", {"--gpus=3,7", "train.py"},
               Host({{"CUDA_VISIBLE_DEVICES", "2,3,5,7"}}, 8)};
    c.topology_size = 2;
    c.common = CollectiveCommon(2, L + "40000," + L + "40001", 2, 1, "1,3", true);
    c.local = {Coll(0, 0, L + "40000", "1"), Coll(1, 1, L + "40001", "3")};
    cases.push_back(c);
  }
  {
    PlanCase c{"collective_all_visible_gpus_by_default", {"train.py"}, Host({{"CUDA_VISIBLE_DEVICES", "2,3,5,7"}})};
    c.topology_size = 4;
    c.common = CollectiveCommon(4, L + "40000," + L + "40001," + L + "40002," + L + "40003", 4, 1, "0,1,2,3", true);
    c.local = {Coll(0, 0, L + "40000", "0"), Coll(1, 1, L + "40001", "1"), Coll(2, 2, L + "40002", "2"),
               Coll(3, 3, L + "40003", "3")};
    cases.push_back(c);
  }
  {
    PlanCase c{"collective_nproc2_groups_four_gpus", {"--nproc_per_node=2", "train.py"}, Host({}, 4)};
    c.topology_size = 2;
    c.common = CollectiveCommon(2, L + "40000," + L + "40001", 2, 1, "0:1,2:3", true);
    c.local = {Coll(0, 0, L + "40000", "0,1"), Coll(1, 1, L + "40001", "2,3")};
    cases.push_back(c);
  }
  {
    PlanCase c{"collective_one_process_two_selected_gpus", {"--gpus=5,6", "--nproc_per_node=1", "train.py"},
               Host({{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}})};
    c.topology_size = 1;
    c.common = CollectiveCommon(1, L + "40000", 1, 1, "1:2", true);
    c.local = {Coll(0, 0, L + "40000", "1,2")};
    cases.push_back(c);
  }
  {
    // --host wins over POD_IP; every node uses 6070.. ; this node is the second: ranks 4..7.
    PlanCase c{"multinode_second_node_by_host_flag",
               {"--ips=10.0.0.1,10.0.0.2", "--host=10.0.0.2", "train.py"}, Host({{"POD_IP", "10.0.0.1"}}, 4)};
    c.node_rank = 1;
    c.topology_size = 8;
    const std::string eps =
        "10.0.0.1:6070,10.0.0.1:6071,10.0.0.1:6072,10.0.0.1:6073,10.0.0.2:6070,10.0.0.2:6071,10.0.0.2:6072,10.0.0.2:6073";
    c.common = CollectiveCommon(8, eps, 4, 2, "0,1,2,3,0,1,2,3", true);
    c.local = {Coll(4, 0, "10.0.0.2:6070", "0"), Coll(5, 1, "10.0.0.2:6071", "1"), Coll(6, 2, "10.0.0.2:6072", "2"),
               Coll(7, 3, "10.0.0.2:6073", "3")};
    c.endpoints_log =
        "PADDLE_TRAINER_ENDPOINTS: \n10.0.0.1:6070\n10.0.0.1:6071\n10.0.0.1:6072\n10.0.0.1:6073\n"
        "10.0.0.2:6070\n10.0.0.2:6071\n10.0.0.2:6072\n10.0.0.2:6073\n";
    cases.push_back(c);
  }
  {
    PlanCase c{"multinode_node_by_pod_ip_ports_from_flags_start_port",
               {"--ips", "10.0.0.1,10.0.0.2", "--nproc_per_node", "2", "train.py"},
               Host({{"POD_IP", "10.0.0.2"}, {"FLAGS_START_PORT", "7100"}})};
    c.node_rank = 1;
    c.topology_size = 4;
    c.common = CollectiveCommon(4, "10.0.0.1:7100,10.0.0.1:7101,10.0.0.2:7100,10.0.0.2:7101", 2, 2, ",,,", false);
    c.local = {Coll(2, 0, "10.0.0.2:7100", ""), Coll(3, 1, "10.0.0.2:7101", "")};
    cases.push_back(c);
  }
  {
    PlanCase c{"multinode_node_by_local_address_start_port_flag_beats_env",
               {"--ips=10.0.0.1,10.0.0.2", "--start_port=9100", "--nproc_per_node=2", "train.py"},
               Host({{"FLAGS_START_PORT", "7100"}}, 0, {"127.0.0.1", "10.0.0.1", "node-a"})};
    c.node_rank = 0;
    c.topology_size = 4;
    c.common = CollectiveCommon(4, "10.0.0.1:9100,10.0.0.1:9101,10.0.0.2:9100,10.0.0.2:9101", 2, 2, ",,,", false);
    c.local = {Coll(0, 0, "10.0.0.1:9100", ""), Coll(1, 1, "10.0.0.1:9101", "")};
    cases.push_back(c);
  }
  {
    PlanCase c{"single_node_fixed_start_port_flag", {"--start_port=9100", "--nproc_per_node=2", "train.py"}, Host()};
    c.topology_size = 2;
    c.common = CollectiveCommon(2, L + "9100," + L + "9101", 2, 1, ",", false);
    c.local = {Coll(0, 0, L + "9100", ""), Coll(1, 1, L + "9101", "")};
    cases.push_back(c);
  }
  {
    PlanCase c{"single_node_fixed_flags_start_port_env", {"--nproc_per_node=2", "train.py"},
               Host({{"FLAGS_START_PORT", "7100"}})};
    c.topology_size = 2;
    c.common = CollectiveCommon(2, L + "7100," + L + "7101", 2, 1, ",", false);
    c.local = {Coll(0, 0, L + "7100", ""), Coll(1, 1, L + "7101", "")};
    cases.push_back(c);
  }
  {
    PlanCase c{"managed_cluster_global_ranks_default_ports", {"train.py"}, Host(ClusterEnvNode1(), 2)};
    c.node_rank = 1;
    c.topology_size = 4;
    c.common = CollectiveCommon(4, "10.1.0.1:6170,10.1.0.1:6171,10.1.0.2:6170,10.1.0.2:6171", 2, 2, "0,1,0,1", true);
    c.local = {Coll(2, 0, "10.1.0.2:6170", "0"), Coll(3, 1, "10.1.0.2:6171", "1")};
    cases.push_back(c);
  }
  {
    PlanCase c{"managed_cluster_distributed_trainer_endpoints_ips_ignored",
               {"--ips=1.2.3.4,5.6.7.8", "--nproc_per_node=2", "train.py"},
               Host(Plus(ClusterEnvNode1(), {{"DISTRIBUTED_TRAINER_ENDPOINTS",
                                              "10.1.0.1:7001,10.1.0.1:7002,10.1.0.2:7003,10.1.0.2:7004"}}))};
    c.node_rank = 1;
    c.topology_size = 4;
    c.common = CollectiveCommon(4, "10.1.0.1:7001,10.1.0.1:7002,10.1.0.2:7003,10.1.0.2:7004", 2, 2, ",,,", false);
    c.local = {Coll(2, 0, "10.1.0.2:7003", ""), Coll(3, 1, "10.1.0.2:7004", "")};
    c.note = "--ips is ignored";
    cases.push_back(c);
  }
  {
    PlanCase c{"managed_cluster_node0_paddle_port_more_ports_than_processes", {"train.py"},
               Host({{"PADDLE_TRAINERS", "10.1.0.1,10.1.0.2"},
                     {"POD_IP", "10.1.0.1"},
                     {"PADDLE_TRAINER_ID", "0"},
                     {"TRAINER_PORTS_NUM", "4"},
                     {"PADDLE_TRAINERS_NUM", "2"},
                     {"PADDLE_PORT", "8000"}})};
    c.node_rank = 0;
    c.topology_size = 2;
    c.common = CollectiveCommon(2, "10.1.0.1:8000,10.1.0.2:8000", 1, 2, ",", false);
    c.local = {Coll(0, 0, "10.1.0.1:8000", "")};
    cases.push_back(c);
  }
  {
    // PADDLE_TRAINERS_NUM=1 is Paddle's "not a cluster": a plain single-node job.
    PlanCase c{"cluster_inputs_with_one_trainer_are_not_a_cluster", {"train.py"},
               Host({{"PADDLE_TRAINERS", "10.1.0.1"},
                     {"POD_IP", "10.1.0.1"},
                     {"PADDLE_TRAINER_ID", "0"},
                     {"TRAINER_PORTS_NUM", "1"},
                     {"PADDLE_TRAINERS_NUM", "1"}})};
    c.topology_size = 1;
    c.common = CollectiveCommon(1, L + "40000", 1, 1, "", false);
    c.local = {Coll(0, 0, L + "40000", "")};
    cases.push_back(c);
  }
  {
    PlanCase c{"ps_local_simulation", {"--server_num=2", "--worker_num=3", "train.py"}, Host()};
    c.mode = JobMode::kParameterServer;
    c.topology_size = 5;
    c.common = {{"PADDLE_PSERVERS_IP_PORT_LIST", L + "40000," + L + "40001"},
                {"PADDLE_TRAINER_ENDPOINTS", L + "40002," + L + "40003," + L + "40004"},
                {"PADDLE_TRAINERS_NUM", "3"},
                {"PADDLE_GLOO_HTTP_ENDPOINT", L + "40005"},
                {"PADDLE_WITH_GLOO", "0"},
                {"PADDLE_GLOO_RENDEZVOUS", "3"}};
    c.local = {Server(0, 0, L + "40000"), Server(1, 1, L + "40001"), Trainer(0, 0, L + "40002"),
               Trainer(1, 1, L + "40003"), Trainer(2, 2, L + "40004")};
    c.endpoints_log =
        "PADDLE_TRAINER_ENDPOINTS: \n127.0.0.1:40002\n127.0.0.1:40003\n127.0.0.1:40004\n"
        "PADDLE_PSERVERS_IP_PORT_LIST: \n127.0.0.1:40000\n127.0.0.1:40001\n";
    cases.push_back(c);
  }
  {
    PlanCase c{"ps_multinode_this_host_runs_some_processes",
               {"--servers=10.0.0.1:6000,10.0.0.2:6000", "--workers=10.0.0.1:6100,10.0.0.2:6100,10.0.0.2:6101",
                "--host=10.0.0.2", "run.sh", "-v"},
               Host()};
    c.mode = JobMode::kParameterServer;
    c.node_rank = 1;
    c.topology_size = 5;
    c.common = {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6000,10.0.0.2:6000"},
                {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6100,10.0.0.2:6100,10.0.0.2:6101"},
                {"PADDLE_TRAINERS_NUM", "3"}};
    c.local = {Server(1, 0, "10.0.0.2:6000"), Trainer(1, 0, "10.0.0.2:6100"), Trainer(2, 1, "10.0.0.2:6101")};
    c.argv = {"/opt/job/run.sh", "-v"};
    cases.push_back(c);
  }
  {
    PlanCase c{"ps_bare_worker_ips_get_6170_plus_server_num", {"--servers=10.0.0.1:6170,10.0.0.2:6170",
                                                             "--workers=10.0.0.1,10.0.0.2", "train.py"},
               Host({{"POD_IP", "10.0.0.1"}})};
    c.mode = JobMode::kParameterServer;
    c.node_rank = 0;
    c.topology_size = 4;
    c.common = {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6170,10.0.0.2:6170"},
                {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6172,10.0.0.2:6173"},
                {"PADDLE_TRAINERS_NUM", "2"}};
    c.local = {Server(0, 0, "10.0.0.1:6170"), Trainer(0, 0, "10.0.0.1:6172")};
    cases.push_back(c);
  }
  {
    PlanCase c{"ps_bare_worker_ips_on_one_node", {"--server_num=1", "--servers=10.0.0.1:6170",
                                                 "--workers=10.0.0.1,10.0.0.1", "train.py"},
               Host()};
    c.mode = JobMode::kParameterServer;
    c.topology_size = 3;
    c.common = {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6170"},
                {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6171,10.0.0.1:6172"},
                {"PADDLE_TRAINERS_NUM", "2"}};
    c.local = {Server(0, 0, "10.0.0.1:6170"), Trainer(0, 0, "10.0.0.1:6171"), Trainer(1, 1, "10.0.0.1:6172")};
    cases.push_back(c);
  }
  {
    PlanCase c{"ps_node_found_by_local_address",
               {"--run_mode=ps", "--servers=10.0.0.1:6000,10.0.0.2:6000", "--workers=10.0.0.1:6100,10.0.0.2:6100",
                "train.py"},
               Host({}, 0, {"127.0.0.1", "10.0.0.2"})};
    c.mode = JobMode::kParameterServer;
    c.node_rank = 1;
    c.topology_size = 4;
    c.local = {Server(1, 0, "10.0.0.2:6000"), Trainer(1, 0, "10.0.0.2:6100")};
    cases.push_back(c);
  }
  {
    // Paddle's launcher runs on CPU where there is no GPU, whatever --gpus says; so does fleetrun.
    PlanCase c{"ps_gpus_flag_on_a_cpu_only_host_runs_the_trainers_on_cpu",
               {"--server_num=1", "--worker_num=2", "--gpus=0", "train.py"}, Host()};
    c.mode = JobMode::kParameterServer;
    c.topology_size = 3;
    c.local = {With(Server(0, 0, L + "40000"), {}, {"CUDA_VISIBLE_DEVICES"}),
               With(Trainer(0, 0, L + "40001"), {}, {"CUDA_VISIBLE_DEVICES"}),
               With(Trainer(1, 1, L + "40002"), {}, {"CUDA_VISIBLE_DEVICES"})};
    c.note = "--gpus=0 is ignored and the job runs on CPU";
    cases.push_back(c);
  }
  {
    PlanCase c{"ps_trainers_get_one_gpu_each_with_gpus_flag", {"--server_num=1", "--worker_num=2", "--gpus=4,6", "train.py"},
               Host({{"CUDA_VISIBLE_DEVICES", "4,6"}})};
    c.mode = JobMode::kParameterServer;
    c.topology_size = 3;
    c.local = {With(Server(0, 0, L + "40000"), {}, {"CUDA_VISIBLE_DEVICES"}),
               With(Trainer(0, 0, L + "40001"), {{"CUDA_VISIBLE_DEVICES", "4"}, {"FLAGS_selected_gpus", "0"}}),
               With(Trainer(1, 1, L + "40002"), {{"CUDA_VISIBLE_DEVICES", "6"}, {"FLAGS_selected_gpus", "0"}})};
    cases.push_back(c);
  }
  {
    // The platform already set the role env: the script runs once, env unchanged.
    PlanCase c{"ps_managed_cluster_with_training_role_starts_directly",
               {"--server_num=1", "--worker_num=1", "train.py"},
               Host({{"PADDLE_TRAINERS", "10.1.0.1,10.1.0.2"},
                     {"POD_IP", "10.1.0.1"},
                     {"PADDLE_TRAINER_ID", "0"},
                     {"TRAINER_PORTS_NUM", "1"},
                     {"PADDLE_TRAINERS_NUM", "2"},
                     {"TRAINING_ROLE", "PSERVER"},
                     {"PADDLE_PORT", "6170"},
                     {"PADDLE_PSERVERS_IP_PORT_LIST", "10.1.0.1:6170,10.1.0.2:6170"}})};
    c.mode = JobMode::kParameterServer;
    c.direct_start = true;
    Want only;
    only.role = Role::kServer;
    only.log_file = "serverlog.0";
    only.echo = true;
    c.local = {only};
    cases.push_back(c);
  }
  {
    // A FleetJob pod with processesPerPod 1 gives its command rank 1 of 3's own env: fleetrun
    // runs the script once with it (not as a one-node job on 127.0.0.1, rank 0 of 1).
    PlanCase c{"collective_trainer_env_from_the_platform_starts_directly",
               {"train.py"},
               Host({{"PADDLE_TRAINER_ID", "1"},
                     {"PADDLE_TRAINERS_NUM", "3"},
                     {"PADDLE_TRAINER_ENDPOINTS", "10.1.0.1:6170,10.1.0.2:6170,10.1.0.3:6170"},
                     {"PADDLE_CURRENT_ENDPOINT", "10.1.0.2:6170"},
                     {"FLAGS_selected_gpus", "0"},
                     {"POD_IP", "10.1.0.2"}})};
    c.direct_start = true;
    c.note = "the platform set this trainer's env (rank 1 of 3)";
    Want only;
    only.role = Role::kTrainer;
    only.rank = 1;
    only.log_file = "workerlog.0";
    only.echo = true;
    c.local = {only};
    cases.push_back(c);
  }
  {
    PlanCase c{"ps_managed_cluster_trainer_by_run_mode", {"--run_mode=ps", "train.py"},
               Host({{"PADDLE_TRAINERS", "10.1.0.1,10.1.0.2"},
                     {"POD_IP", "10.1.0.2"},
                     {"PADDLE_TRAINER_ID", "1"},
                     {"TRAINER_PORTS_NUM", "1"},
                     {"PADDLE_TRAINERS_NUM", "2"},
                     {"TRAINING_ROLE", "TRAINER"},
                     {"PADDLE_PORT", "6171"},
                     {"PADDLE_TRAINER_ENDPOINTS", "10.1.0.1:6171,10.1.0.2:6171"},
                     {"PADDLE_PSERVERS_IP_PORT_LIST", "10.1.0.1:6170,10.1.0.2:6170"}})};
    c.mode = JobMode::kParameterServer;
    c.direct_start = true;
    Want only;
    only.role = Role::kTrainer;
    only.rank = 1;
    only.log_file = "workerlog.0";
    only.echo = true;
    c.local = {only};
    cases.push_back(c);
  }
  {
    PlanCase c{"ps_heter_local_two_stages",
               {"--server_num=1", "--worker_num=2", "--heter_worker_num=2;1", "--heter_devices=gpu;cpu", "train.py"},
               Host({}, 2)};
    c.mode = JobMode::kHeterParameterServer;
    c.topology_size = 6;
    const std::string trainers = L + "40001," + L + "40002";
    const std::string stage2 = L + "40003," + L + "40004";
    const std::string stage3 = L + "40005";
    const std::string all_heter = stage2 + "," + stage3;
    c.common = {{"PADDLE_PSERVERS_IP_PORT_LIST", L + "40000"},
                {"PADDLE_TRAINER_ENDPOINTS", trainers},
                {"PADDLE_TRAINERS_NUM", "2"},
                {"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", all_heter},
                {"PADDLE_HETER_TRAINER_IP_PORT_LIST", all_heter}};
    const EnvMap stages = {{"STAGE_NUM", "3"}, {"PADDLE_STAGE_TRAINERS_NUM", "[2, 2, 1]"}};
    auto trainer = [&](int rank) {
      return With(Trainer(rank, rank, L + std::to_string(40001 + rank)),
                  Plus(stages, {{"STAGE_ID", "1"},
                                {"HETER_DEVICE_TYPE", "cpu"},
                                {"PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST", ""},
                                {"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", stage2}}));
    };
    c.local = {
        With(Server(0, 0, L + "40000"), {}, {"STAGE_ID"}),
        trainer(0),
        trainer(1),
        With(Heter(0, 0, L + "40003", 2, "gpu", trainers, stage3), Plus(stages, {{"FLAGS_selected_gpus", "0"}, {"CUDA_VISIBLE_DEVICES", "0"}})),
        With(Heter(1, 1, L + "40004", 2, "gpu", trainers, stage3), Plus(stages, {{"FLAGS_selected_gpus", "0"}, {"CUDA_VISIBLE_DEVICES", "1"}})),
        With(Heter(2, 2, L + "40005", 3, "cpu", stage2, ""), stages, {"FLAGS_selected_gpus", "CUDA_VISIBLE_DEVICES"}),
    };
    c.endpoints_log =
        "PADDLE_TRAINER_ENDPOINTS: \n127.0.0.1:40001\n127.0.0.1:40002\n"
        "PADDLE_PSERVERS_IP_PORT_LIST: \n127.0.0.1:40000\n"
        "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST: \n127.0.0.1:40003\n127.0.0.1:40004\n127.0.0.1:40005\n";
    cases.push_back(c);
  }
  {
    // A node that runs only heter workers: heterlog.0/1, nothing echoed (no local trainer 0).
    PlanCase c{"ps_heter_multinode_heter_only_node",
               {"--run_mode=ps-heter", "--servers=10.0.0.1:6000", "--workers=10.0.0.1:6100",
                "--heter_workers=10.0.0.2:6200,10.0.0.2:6201;10.0.0.3:6300", "--heter_devices=cpu;cpu",
                "--host=10.0.0.2", "train.py"},
               Host()};
    c.mode = JobMode::kHeterParameterServer;
    c.node_rank = 1;
    c.topology_size = 5;
    c.common = {{"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", "10.0.0.2:6200,10.0.0.2:6201,10.0.0.3:6300"},
                {"PADDLE_TRAINERS_NUM", "1"}};
    c.local = {Heter(0, 0, "10.0.0.2:6200", 2, "cpu", "10.0.0.1:6100", "10.0.0.3:6300"),
               Heter(1, 1, "10.0.0.2:6201", 2, "cpu", "10.0.0.1:6100", "10.0.0.3:6300")};
    cases.push_back(c);
  }
  return cases;
}

void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.name; }

class FleetrunPlan : public ::testing::TestWithParam<PlanCase> {};

// Every wanted variable is set to its value.
void ExpectEnv(const EnvMap& got, const EnvMap& want) {
  for (const auto& [name, value] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << name << " is not set (want '" << value << "')";
    } else {
      EXPECT_EQ(it->second, value) << name;
    }
  }
}

// The env as the child sees it (fleetrun's env with the contract on top) passes Paddle's reader.
void ExpectPaddleReadsIt(const PlanCase& c, const HostFacts& facts, const LocalProcess& got, const Want& want) {
  const EnvMap child_env = Overlay(facts.env, got.env);
  const RoleMakerKind kind = c.mode == JobMode::kCollective ? RoleMakerKind::kCollective : RoleMakerKind::kParameterServer;
  auto parsed = ParseProcessEnv(child_env, kind);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_FALSE(parsed->non_distributed);
  EXPECT_EQ(parsed->role, want.role);
  int want_id = want.rank;
  if (want.role == Role::kHeterTrainer) want_id = want.rank + parsed->trainers_num;
  EXPECT_EQ(parsed->id, want_id);
  if (!want.endpoint.empty()) {
    EXPECT_EQ(parsed->current_endpoint, want.endpoint);
  }
}

// One local process against what the case wants of it.
void ExpectLocalProcess(const PlanCase& c, const HostFacts& facts, const LocalProcess& got, const Want& want,
                        const std::vector<std::string>& argv) {
  EXPECT_EQ(got.process.role, want.role);
  if (!c.direct_start) {  // a direct start knows its role from TRAINING_ROLE, not its rank
    EXPECT_EQ(got.process.rank, want.rank);
  }
  EXPECT_EQ(got.log_file, want.log_file);
  EXPECT_EQ(got.echo_to_terminal, want.echo);
  EXPECT_EQ(got.argv, argv);
  if (c.direct_start) {
    EXPECT_TRUE(got.env.empty()) << "direct start must leave the platform's env unchanged";
  } else {
    EXPECT_EQ(got.process.node, c.node_rank);
    EXPECT_EQ(got.process.local_rank, want.local_rank);
    EXPECT_EQ(got.process.endpoint.ToString(), want.endpoint);
  }
  ExpectEnv(got.env, c.common);
  ExpectEnv(got.env, want.env);
  for (const std::string& name : want.absent) {
    EXPECT_EQ(got.env.count(name), 0u) << name << " should not be set, is '" << got.env.at(name) << "'";
  }
  ExpectPaddleReadsIt(c, facts, got, want);
}

// Local trainer 0, and only it, is echoed to the terminal; the banner has a "Distributed Envs"
// table for the first local process of each role.
void ExpectEchoAndBanner(const PlanCase& c, const LaunchPlan& plan) {
  int echoed = 0;
  for (const LocalProcess& p : plan.processes) {
    echoed += p.echo_to_terminal ? 1 : 0;
    if (!c.direct_start) {
      EXPECT_EQ(p.echo_to_terminal, p.process.role == Role::kTrainer && p.process.local_rank == 0) << p.log_file;
    }
  }
  EXPECT_LE(echoed, 1);
  const std::string banner = FormatPlan(plan);
  std::set<Role> roles;
  for (const LocalProcess& p : plan.processes) roles.insert(p.process.role);
  size_t tables = 0;
  for (size_t at = banner.find("Distributed Envs"); at != std::string::npos; at = banner.find("Distributed Envs", at + 1)) ++tables;
  if (!c.direct_start) {
    EXPECT_EQ(tables, roles.size()) << banner;
  }
}

TEST_P(FleetrunPlan, PlansTheLocalProcesses) {
  const PlanCase& c = GetParam();
  const HostFacts facts = c.host.Facts();
  auto plan = Plan(c.args, facts);
  ASSERT_TRUE(plan.ok()) << plan.error();

  EXPECT_EQ(plan->direct_start, c.direct_start);
  EXPECT_EQ(plan->topology.mode, c.mode);
  EXPECT_EQ(plan->log_dir, "log");
  if (!c.direct_start) {
    EXPECT_EQ(plan->node_rank, c.node_rank);
    EXPECT_EQ(static_cast<int>(plan->topology.processes.size()), c.topology_size);
  }
  if (!c.endpoints_log.empty()) {
    EXPECT_EQ(plan->endpoints_log, c.endpoints_log);
  }
  if (!c.note.empty()) {
    bool found = false;
    for (const std::string& note : plan->notes) found = found || note.find(c.note) != std::string::npos;
    EXPECT_TRUE(found) << "no note mentions '" << c.note << "'";
  }
  const std::vector<std::string> argv = c.argv.empty() ? std::vector<std::string>{"python3", "-u", "train.py"} : c.argv;

  ASSERT_EQ(plan->processes.size(), c.local.size());
  std::set<std::string> log_files;
  for (size_t i = 0; i < c.local.size(); ++i) {
    const LocalProcess& got = plan->processes[i];
    const Want& want = c.local[i];
    SCOPED_TRACE("local process " + std::to_string(i) + " (" + RoleText(want.role) + " " +
                 std::to_string(want.rank) + ")");
    EXPECT_TRUE(log_files.insert(got.log_file).second) << "log file used twice: " << got.log_file;
    ASSERT_NO_FATAL_FAILURE(ExpectLocalProcess(c, facts, got, want, argv));
  }
  ExpectEchoAndBanner(c, *plan);
}

INSTANTIATE_TEST_SUITE_P(Cases, FleetrunPlan, ::testing::ValuesIn(PlanCases()),
                         [](const ::testing::TestParamInfo<PlanCase>& param_info) { return param_info.param.name; });

struct BadPlan {
  std::string name;
  std::vector<std::string> args;
  FakeHost host;
  std::vector<std::string> message_parts;
};

void PrintTo(const BadPlan& c, std::ostream* os) { *os << c.name; }

class FleetrunPlanError : public ::testing::TestWithParam<BadPlan> {};

TEST_P(FleetrunPlanError, IsRefusedWithAMessageNamingTheProblem) {
  const BadPlan& c = GetParam();
  auto options = ParseFlags(c.args);
  ASSERT_TRUE(options.ok()) << "these flags must parse; the plan refuses them: " << options.error();
  auto plan = PlanLaunch(*options, c.host.Facts());
  ASSERT_FALSE(plan.ok()) << "planned " << plan->processes.size() << " processes";
  EXPECT_EQ(plan.error().find('\n'), std::string::npos) << "must be one line: " << plan.error();
  for (const std::string& part : c.message_parts) EXPECT_THAT(plan.error(), HasSubstr(part));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FleetrunPlanError,
    ::testing::Values(
        BadPlan{"servers_endpoint_without_port", {"--servers=127.0.0.1:6000,127.0.0.1", "--worker_num=1", "train.py"}, Host(),
                {"--servers", "'127.0.0.1' has no port"}},
        BadPlan{"servers_port_out_of_range", {"--servers=127.0.0.1:70000", "--worker_num=1", "train.py"}, Host(),
                {"--servers", "70000", "out of range"}},
        BadPlan{"workers_port_zero", {"--server_num=1", "--workers=127.0.0.1:0", "train.py"}, Host(),
                {"--workers", "port 0", "out of range"}},
        BadPlan{"workers_mix_bare_and_ported", {"--server_num=1", "--workers=10.0.0.1:6100,10.0.0.2", "train.py"}, Host(),
                {"--workers", "mixes"}},
        BadPlan{"duplicate_servers", {"--servers=127.0.0.1:6000,127.0.0.1:6000", "--worker_num=1", "train.py"}, Host(),
                {"127.0.0.1:6000", "twice"}},
        BadPlan{"duplicate_across_servers_and_workers", {"--servers=127.0.0.1:6000", "--workers=127.0.0.1:6000", "train.py"},
                Host(), {"127.0.0.1:6000", "two processes"}},
        BadPlan{"duplicate_across_workers_and_heter",
                {"--servers=127.0.0.1:6000", "--workers=127.0.0.1:6001", "--heter_workers=127.0.0.1:6001",
                 "--heter_devices=cpu", "train.py"},
                Host(), {"127.0.0.1:6001", "two processes"}},
        BadPlan{"bare_worker_port_collides_with_server", {"--servers=127.0.0.1:6171", "--workers=127.0.0.1", "train.py"},
                Host(), {"127.0.0.1:6171", "two processes"}},
        BadPlan{"gpus_not_in_cuda_visible_devices", {"--gpus=4", "train.py"}, Host({{"CUDA_VISIBLE_DEVICES", "2,3"}}, 8),
                {"--gpus", "GPU 4", "CUDA_VISIBLE_DEVICES=2,3"}},
        BadPlan{"gpus_not_present", {"--gpus=2", "train.py"}, Host({}, 2), {"--gpus", "GPU 2", "not present"}},
        BadPlan{"gpus_listed_twice", {"--gpus=1,1", "train.py"}, Host({}, 2), {"--gpus", "GPU 1 twice"}},
        BadPlan{"nproc_does_not_divide_gpus", {"--nproc_per_node=2", "train.py"}, Host({{"CUDA_VISIBLE_DEVICES", "0,1,2"}}),
                {"--nproc_per_node=2", "does not divide", "3 GPUs"}},
        BadPlan{"nproc_larger_than_gpus", {"--nproc_per_node=4", "--gpus=0,1", "train.py"}, Host({}, 2),
                {"--nproc_per_node=4", "2 GPUs"}},
        BadPlan{"missing_script", {"nope.py"}, Host(), {"nope.py", "does not exist"}},
        BadPlan{"collective_run_mode_with_servers", {"--run_mode=collective", "--servers=127.0.0.1:6000", "train.py"}, Host(),
                {"--run_mode=collective", "parameter-server flags"}},
        BadPlan{"collective_run_mode_with_server_num", {"--run_mode=collective", "--server_num=1", "train.py"}, Host(),
                {"--run_mode=collective"}},
        BadPlan{"ps_run_mode_with_heter_flags", {"--run_mode=ps", "--server_num=1", "--worker_num=1", "--heter_devices=cpu", "train.py"},
                Host(), {"ps-heter"}},
        BadPlan{"unknown_run_mode", {"--run_mode=allreduce", "train.py"}, Host(), {"--run_mode", "allreduce"}},
        BadPlan{"this_host_not_in_ips", {"--ips=10.0.0.1,10.0.0.2", "train.py"}, Host(),
                {"is not in --ips", "10.0.0.1,10.0.0.2", "--host"}},
        BadPlan{"host_flag_not_in_ips", {"--ips=10.0.0.1,10.0.0.2", "--host=10.0.0.3", "train.py"}, Host(),
                {"--host=10.0.0.3", "is not in --ips"}},
        BadPlan{"pod_ip_not_in_ips", {"--ips=10.0.0.1,10.0.0.2", "train.py"}, Host({{"POD_IP", "10.0.0.9"}}),
                {"POD_IP=10.0.0.9", "is not in --ips"}},
        BadPlan{"ips_lists_a_node_twice", {"--ips=10.0.0.1,10.0.0.1", "train.py"}, Host(), {"10.0.0.1", "twice"}},
        BadPlan{"ips_entry_with_port", {"--ips=10.0.0.1:80,10.0.0.2", "train.py"}, Host(), {"--ips", "10.0.0.1:80"}},
        BadPlan{"start_port_leaves_no_room", {"--start_port=65534", "--nproc_per_node=4", "train.py"}, Host(),
                {"65534", "65536"}},
        BadPlan{"flags_start_port_not_a_port", {"train.py"}, Host({{"FLAGS_START_PORT", "abc"}}), {"FLAGS_START_PORT"}},
        BadPlan{"server_num_mismatch_with_servers",
                {"--server_num=3", "--servers=127.0.0.1:6000,127.0.0.1:6001", "--worker_num=1", "train.py"}, Host(),
                {"--server_num=3", "2 servers"}},
        BadPlan{"worker_num_mismatch_with_workers", {"--server_num=1", "--worker_num=1", "--workers=127.0.0.1,127.0.0.1", "train.py"},
                Host(), {"--worker_num=1", "2 workers"}},
        BadPlan{"ps_without_servers", {"--worker_num=2", "train.py"}, Host(), {"--server_num or --servers"}},
        BadPlan{"ps_without_workers", {"--server_num=2", "train.py"}, Host(), {"--worker_num or --workers"}},
        BadPlan{"ps_with_nproc_per_node", {"--server_num=1", "--worker_num=1", "--nproc_per_node=2", "train.py"}, Host(),
                {"--nproc_per_node"}},
        BadPlan{"ps_with_ips", {"--server_num=1", "--worker_num=1", "--ips=10.0.0.1,10.0.0.2", "train.py"}, Host(), {"--ips"}},
        BadPlan{"ps_this_host_not_listed", {"--servers=10.0.0.1:6000", "--workers=10.0.0.2:6100", "train.py"}, Host(),
                {"is not in --servers/--workers"}},
        BadPlan{"heter_devices_count_mismatch",
                {"--server_num=1", "--worker_num=1", "--heter_worker_num=2;1", "--heter_devices=gpu", "train.py"}, Host({}, 2),
                {"--heter_devices", "1 devices", "2 heter stages"}},
        BadPlan{"heter_unknown_device", {"--server_num=1", "--worker_num=1", "--heter_worker_num=1", "--heter_devices=tpu", "train.py"},
                Host(), {"--heter_devices", "tpu"}},
        BadPlan{"heter_worker_num_disagrees_with_list",
                {"--server_num=1", "--worker_num=1", "--heter_workers=127.0.0.1:7000,127.0.0.1:7001", "--heter_worker_num=3",
                 "--heter_devices=cpu", "train.py"},
                Host(), {"--heter_worker_num says 3", "lists 2"}},
        BadPlan{"heter_without_devices", {"--server_num=1", "--worker_num=1", "--heter_worker_num=1", "train.py"}, Host(),
                {"--heter_devices"}},
        BadPlan{"heter_stage_count_zero", {"--server_num=1", "--worker_num=1", "--heter_worker_num=1;0", "--heter_devices=cpu;cpu", "train.py"},
                Host(), {"--heter_worker_num"}},
        BadPlan{"cluster_pod_ip_is_not_its_node", {"train.py"}, Host(Plus(ClusterEnvNode1(), {{"POD_IP", "10.9.9.9"}})),
                {"managed-cluster env", "POD_IP"}},
        BadPlan{"cluster_too_few_trainer_ports", {"--nproc_per_node=3", "train.py"}, Host(ClusterEnvNode1()),
                {"TRAINER_PORTS_NUM is 2", "3 processes"}},
        BadPlan{"cluster_endpoints_wrong_count", {"train.py"},
                Host(Plus(ClusterEnvNode1(), {{"DISTRIBUTED_TRAINER_ENDPOINTS", "10.1.0.1:7001,10.1.0.2:7003"}})),
                {"DISTRIBUTED_TRAINER_ENDPOINTS"}},
        BadPlan{"bad_paddle_with_gloo", {"train.py"}, Host({{"PADDLE_WITH_GLOO", "7"}}), {"PADDLE_WITH_GLOO", "7"}}),
    [](const ::testing::TestParamInfo<BadPlan>& param_info) { return param_info.param.name; });

TEST(FleetrunPlanCommand, PythonScriptsRunUnderPython3UnbufferedOthersDirectly) {
  LaunchOptions py;
  py.training_script = "dir/train.py";
  py.training_script_args = {"--lr", "0.1"};
  EXPECT_EQ(ScriptCommand("dir/train.py", py), (std::vector<std::string>{"python3", "-u", "dir/train.py", "--lr", "0.1"}));
  LaunchOptions sh;
  sh.training_script = "run.sh";
  sh.training_script_args = {"-x"};
  EXPECT_EQ(ScriptCommand("./run.sh", sh), (std::vector<std::string>{"./run.sh", "-x"}));
  LaunchOptions bare;
  bare.training_script = "py";  // ".py" is a suffix, not a substring
  EXPECT_EQ(ScriptCommand("py", bare), (std::vector<std::string>{"py"}));
}

TEST(FleetrunPlanCommand, MissingScriptIsRefusedBeforeAnyPortIsTaken) {
  HostFacts facts = FakeHost().Facts();
  int port_calls = 0;
  facts.free_ports = [&](int count) -> Result<std::vector<int>> {
    ++port_calls;
    return std::vector<int>(static_cast<size_t>(count), 1);
  };
  auto plan = Plan({"--server_num=2", "--worker_num=2", "missing.py"}, facts);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.error(), HasSubstr("missing.py"));
  EXPECT_EQ(port_calls, 0);
}

TEST(FleetrunPlanCommand, FreePortErrorsAreReported) {
  HostFacts facts = FakeHost().Facts();
  facts.free_ports = [](int) -> Result<std::vector<int>> { return Error{"cannot find a free port: no sockets"}; };
  auto plan = Plan({"--nproc_per_node=2", "train.py"}, facts);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.error(), HasSubstr("cannot find a free port"));
}

TEST(FleetrunPlanCommand, LogDirFlagIsKept) {
  auto plan = Plan({"--log_dir=out/logs", "train.py"}, FakeHost().Facts());
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->log_dir, "out/logs");
}

// Every endpoint a PS job uses -- each process's own and the gloo HTTP store on server 0 -- is a
// socket someone binds, so they must all differ.
std::vector<std::string> AllBoundEndpoints(const LaunchPlan& plan) {
  std::vector<std::string> out;
  for (const Process& p : plan.topology.processes) out.push_back(p.endpoint.ToString());
  out.push_back(plan.topology.gloo.http_endpoint);
  return out;
}

void ExpectDistinct(const std::vector<std::string>& endpoints) {
  std::set<std::string> seen;
  for (const std::string& e : endpoints) EXPECT_TRUE(seen.insert(e).second) << e << " is used twice";
}

TEST(FleetrunPlanPorts, GlooHttpEndpointIsOnServerZeroAndFreeLocally) {
  auto plan = Plan({"--server_num=2", "--worker_num=2", "train.py"}, FakeHost().Facts());
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->topology.gloo.http_endpoint.rfind("127.0.0.1:", 0), 0u) << plan->topology.gloo.http_endpoint;
  ExpectDistinct(AllBoundEndpoints(*plan));
}

// Multi-node default ports are fixed (6170 + position); the HTTP store's default must still skip
// ports in use on server 0's host (10.0.0.1:6174 = 6170 + 4 processes, and 6175).
TEST(FleetrunPlanPorts, DefaultGlooHttpPortDoesNotCollideWithAGivenEndpoint) {
  auto plan = Plan({"--servers=10.0.0.1:6174,10.0.0.2:6174", "--workers=10.0.0.1:6175,10.0.0.2:6175",
                    "--host=10.0.0.1", "train.py"},
                   FakeHost().Facts());
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->topology.gloo.http_endpoint, "10.0.0.1:6176");
  ExpectDistinct(AllBoundEndpoints(*plan));
}

// The real FindFreePorts releases its ports before returning, so two requests may overlap; the
// planner must take all of a job's free ports in one request. This fake models the overlap: each
// call gets the lowest currently-unbound ports.
TEST(FleetrunPlanPorts, FreePortsFromSeparateRequestsNeverCollide) {
  HostFacts facts = FakeHost().Facts();
  facts.free_ports = [](int count) -> Result<std::vector<int>> {
    std::vector<int> ports;
    for (int i = 0; i < count; ++i) ports.push_back(kFirstFreePort + i);  // released after each call
    return ports;
  };
  auto plan = Plan({"--server_num=2", "--worker_num=2", "--heter_worker_num=1", "--heter_devices=cpu", "train.py"}, facts);
  ASSERT_TRUE(plan.ok()) << plan.error();
  ExpectDistinct(AllBoundEndpoints(*plan));
}

}  // namespace
}  // namespace fleet::launcher

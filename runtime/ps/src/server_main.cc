// fleet-ps-server: a parameter server from the Paddle env alone (TRAINING_ROLE=PSERVER,
// PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINERS_NUM, POD_IP, PADDLE_PORT). Tables are created by
// the trainers (or loaded with --model_dir). --sparse_max_rows N: the row limit per sparse table of
// this server where the table's declaration sets none (FLEET_PS_SPARSE_MAX_ROWS; the flag wins).
// --save_root DIR: trainers' saves go under DIR only (FLEET_PS_SAVE_ROOT; default: --model_dir, else
// the working directory).
// Exits 0 once every trainer has stopped; 2 on a bad env or flag; 1 when it cannot serve;
// 128+signal after SIGINT/SIGTERM (a clean shutdown).
#include <csignal>
#include <cstring>
#include <iostream>
#include <string>

#include "fleet/ps/fleet.h"

namespace {

volatile std::sig_atomic_t g_signal = 0;

void OnSignal(int sig) { g_signal = sig; }

int Usage() {
  std::cerr << "usage: fleet-ps-server [--model_dir DIR] [--save_root DIR] [--sparse_max_rows N]\n"
               "Serves the parameter-server shard this process's Paddle env names (TRAINING_ROLE=PSERVER).\n"
               "--save_root: the directory trainers' saves must be under (default: --model_dir, else the working directory)\n"
               "--sparse_max_rows: the most rows this server holds of a sparse table that declares no max_rows\n";
  return 2;
}

// --name VALUE or --name=VALUE at argv[*i] (advancing *i past VALUE).
bool Flag(int argc, char** argv, int* i, const std::string& name, std::string* value) {
  const std::string arg = argv[*i];
  if (arg == name && *i + 1 < argc) {
    *value = argv[++*i];
    return true;
  }
  if (arg.rfind(name + "=", 0) == 0) {
    *value = arg.substr(name.size() + 1);
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, max_rows, save_root;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (Flag(argc, argv, &i, "--model_dir", &model_dir) || Flag(argc, argv, &i, "--sparse_max_rows", &max_rows) ||
        Flag(argc, argv, &i, "--save_root", &save_root)) {
      // taken
    } else if (arg == "-h" || arg == "--help") {
      Usage();
      return 0;
    } else {
      std::cerr << "fleet-ps-server: unknown argument '" << arg << "'\n";
      return Usage();
    }
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  // The flag is the env knob said on the command line; Fleet checks the value.
  fleet::EnvMap env = fleet::CurrentProcessEnv();
  if (!max_rows.empty()) env["FLEET_PS_SPARSE_MAX_ROWS"] = max_rows;
  if (!save_root.empty()) env["FLEET_PS_SAVE_ROOT"] = save_root;
  std::unique_ptr<fleet::ps::Fleet> fleet;
  if (auto s = fleet::ps::Fleet::Init(env, fleet::ps::Strategy{}, &fleet); !s.ok()) {
    std::cerr << "fleet-ps-server: " << s.message() << "\n";
    return 2;
  }
  if (!fleet->is_server()) {
    std::cerr << "fleet-ps-server: TRAINING_ROLE must be PSERVER\n";
    return 2;
  }
  if (auto s = fleet->InitServer(model_dir); !s.ok()) {
    std::cerr << "fleet-ps-server: " << s.ToString() << "\n";
    return s.code() == fleet::ps::Code::kInvalidArgument ? 2 : 1;
  }
  auto s = fleet->RunServer([] { return g_signal != 0; });
  if (s.code() == fleet::ps::Code::kCancelled) return 128 + static_cast<int>(g_signal);
  if (!s.ok()) {
    std::cerr << "fleet-ps-server: " << s.ToString() << "\n";
    return 1;
  }
  return 0;
}

// fleet-ps-server: a parameter server from the Paddle env alone (TRAINING_ROLE=PSERVER,
// PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINERS_NUM, POD_IP, PADDLE_PORT). Tables are created by
// the trainers (or loaded with --model_dir). Exits 0 once every trainer has stopped; 2 on a bad
// env or flag; 1 when it cannot serve; 128+signal after SIGINT/SIGTERM (a clean shutdown).
#include <csignal>
#include <cstring>
#include <iostream>
#include <string>

#include "fleet/ps/fleet.h"

namespace {

volatile std::sig_atomic_t g_signal = 0;

void OnSignal(int sig) { g_signal = sig; }

int Usage() {
  std::cerr << "usage: fleet-ps-server [--model_dir DIR]\n"
               "Serves the parameter-server shard this process's Paddle env names (TRAINING_ROLE=PSERVER).\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--model_dir" && i + 1 < argc) {
      model_dir = argv[++i];
    } else if (arg.rfind("--model_dir=", 0) == 0) {
      model_dir = arg.substr(std::strlen("--model_dir="));
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

  std::unique_ptr<fleet::ps::Fleet> fleet;
  if (auto s = fleet::ps::Fleet::Init(fleet::CurrentProcessEnv(), fleet::ps::Strategy{}, &fleet); !s.ok()) {
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

// Malformed input never crashes: every parser, fed garbage directly or through a mutated env,
// returns a value or an error. Each sweep runs in a child process (EXPECT_EXIT) with a bounded
// address space, so that a crash, an exception or a runaway allocation shows up as a failing test
// naming the input instead of killing the whole test binary.
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "contract_fixtures.h"
#include "fleet/base/strings.h"
#include "fleet/runtime/env_contract.h"

namespace fleet {
namespace {

using namespace fleet::testing;  // NOLINT: test fixtures

std::vector<std::string> Garbage() {
  return {"",
          std::string(1 << 20, 'a'),
          std::string(1 << 20, ','),
          std::string(1 << 20, '9'),
          ",",
          ",,,",
          ":",
          ":::",
          "a:1:2",
          "[::1]:80",
          "\xff\xfe\xfd",
          "h\xc3\xb6st:80",
          std::string("a\0b:80", 6),
          " ",
          "\t\r\n",
          "-1",
          "-0",
          "+1",
          "0",
          "65536",
          "2147483647",
          "2147483648",
          "-2147483648",
          "99999999999999999999",
          "a:99999999999999999999",
          "a:-1",
          "[",
          "[]",
          "[1,",
          "[,]",
          "[99999999999999999999]",
          "HETER",
          "nccl"};
}

// One probe: returns "" when the call produced a value or a non-empty error, else what was wrong.
using Probe = std::function<std::string()>;

template <typename T>
std::string Check(const Result<T>& r) { return r.ok() || !r.error().empty() ? "" : "error with empty message"; }

// The input as a one-line, printable, short description.
std::string Describe(const std::string& input) {
  std::string shown;
  for (size_t i = 0; i < input.size() && i < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(input[i]);
    if (c >= 0x20 && c < 0x7f) {
      shown += input[i];
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      shown += hex;
    }
  }
  if (input.size() > 40) shown += "...(" + std::to_string(input.size()) + " bytes)";
  return "'" + shown + "'";
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;  // gcc
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;  // clang
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

const char* g_probe = "";  // the probe running in the child, for the crash report

extern "C" void ReportCrash(int sig) {
  const char* prefix = "CRASHED while probing ";
  ssize_t ignored = write(STDERR_FILENO, prefix, std::strlen(prefix));
  ignored = write(STDERR_FILENO, g_probe, std::strlen(g_probe));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// Runs every probe in this (child) process; exits 0 when all behaved. Otherwise it reports each
// probe that gave a wrong result or threw, and the one that crashed, on stderr and exits non-zero.
[[noreturn]] void RunProbes(const std::vector<std::pair<std::string, Probe>>& probes) {
  // 1 GiB of address space: a runaway allocation fails fast. Not under AddressSanitizer, which
  // reserves terabytes of shadow memory up front (and reports runaway allocations itself).
  if (!kAddressSanitizer) {
    rlimit limit{size_t{1} << 30, size_t{1} << 30};
    setrlimit(RLIMIT_AS, &limit);
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE}) std::signal(sig, ReportCrash);
  int failures = 0;
  for (const auto& [what, probe] : probes) {
    g_probe = what.c_str();
    try {
      const std::string problem = probe();
      if (!problem.empty()) {
        std::fprintf(stderr, "FAILED %s: %s\n", what.c_str(), problem.c_str());
        ++failures;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "FAILED %s: threw %s\n", what.c_str(), e.what());
      ++failures;
    } catch (...) {
      std::fprintf(stderr, "FAILED %s: threw a non-standard exception\n", what.c_str());
      ++failures;
    }
  }
  std::_Exit(failures == 0 ? 0 : 1);
}

TEST(MalformedInput, EndpointParsersReturnAValueOrAnError) {
  std::vector<std::pair<std::string, Probe>> probes;
  for (const std::string& g : Garbage()) {
    const std::string d = Describe(g);
    probes.push_back({"ParsePort " + d, [g]() -> std::string {
                        auto port = ParsePort(g, "p");
                        if (port.ok() && (*port < 1 || *port > 65535)) return "accepted " + std::to_string(*port);
                        return Check(port);
                      }});
    probes.push_back({"ParseHost " + d, [g] { return Check(ParseHost(g)); }});
    probes.push_back({"ParseEndpoint " + d, [g]() -> std::string {
                        auto endpoint = ParseEndpoint(g);
                        // Whatever is accepted must print as an endpoint that parses back to itself.
                        if (endpoint.ok() && !(ParseEndpoint(endpoint->ToString()).ok() &&
                                               *ParseEndpoint(endpoint->ToString()) == *endpoint)) {
                          return "accepted '" + endpoint->ToString() + "', which does not parse back";
                        }
                        return Check(endpoint);
                      }});
    probes.push_back({"ParseEndpointList " + d, [g] { return Check(ParseEndpointList(g)); }});
    probes.push_back({"ParseEndpointListPortsOptional " + d, [g] { return Check(ParseEndpointListPortsOptional(g)); }});
    probes.push_back({"ParseNonNegativeInt " + d, [g] { return Check(ParseNonNegativeInt(g, "n")); }});
    probes.push_back({"ParseJobMode " + d, [g] { return Check(ParseJobMode(g)); }});
    probes.push_back({"ParseDeviceKind " + d, [g] { return Check(ParseDeviceKind(g)); }});
  }
  EXPECT_EXIT(RunProbes(probes), ::testing::ExitedWithCode(0), "");
}

// Valid envs of every kind to mutate: one variable at a time set to each garbage value or unset.
struct BaseEnv {
  std::string name;
  EnvMap env;
  RoleMakerKind kind;
};

std::vector<BaseEnv> BaseEnvs() {
  const Topology ps = MustBuild(BuildPsTopology(PsTwoServersThreeTrainersLayout()));
  const Topology heter = MustBuild(BuildPsTopology(HeterTwoStagesLayout()));
  const Topology gpu = MustBuild(BuildCollectiveTopology(CollectiveTwoNodesNproc2Layout()));
  const Topology cpu = MustBuild(BuildCollectiveTopology(CollectiveCpuLayout()));
  // Paddle < 2.2 launchers set no PADDLE_DISTRI_BACKEND: a realistic collective env.
  EnvMap gpu_no_backend = EnvOf(gpu, Role::kTrainer, 1);
  gpu_no_backend.erase("PADDLE_DISTRI_BACKEND");
  return {{"ps trainer", EnvOf(ps, Role::kTrainer, 2), RoleMakerKind::kParameterServer},
          {"ps server", EnvOf(ps, Role::kServer, 1), RoleMakerKind::kParameterServer},
          {"heter trainer", EnvOf(heter, Role::kTrainer, 0), RoleMakerKind::kParameterServer},
          {"heter gpu worker", EnvOf(heter, Role::kHeterTrainer, 1), RoleMakerKind::kParameterServer},
          {"heter last worker", EnvOf(heter, Role::kHeterTrainer, 2), RoleMakerKind::kParameterServer},
          {"collective gpu", EnvOf(gpu, Role::kTrainer, 1), RoleMakerKind::kCollective},
          {"collective gpu without backend", gpu_no_backend, RoleMakerKind::kCollective},
          {"collective cpu", EnvOf(cpu, Role::kTrainer, 1), RoleMakerKind::kCollective},
          // The collective role maker reading a PS env and vice versa.
          {"ps trainer read as collective", EnvOf(ps, Role::kTrainer, 0), RoleMakerKind::kCollective},
          {"collective read as ps", EnvOf(gpu, Role::kTrainer, 0), RoleMakerKind::kParameterServer}};
}

std::vector<std::pair<std::string, Probe>> MutatedEnvProbes(const BaseEnv& base) {
  std::vector<std::pair<std::string, Probe>> probes;
  for (const auto& entry : base.env) {
    const std::string name = entry.first;
    EnvMap unset = base.env;
    unset.erase(name);
    probes.push_back({base.name + ": unset " + name,
                      [unset, kind = base.kind] { return Check(ParseProcessEnv(unset, kind)); }});
    for (const std::string& g : Garbage()) {
      EnvMap env = base.env;
      env[name] = g;
      probes.push_back({base.name + ": " + name + "=" + Describe(g),
                        [env, kind = base.kind] { return Check(ParseProcessEnv(env, kind)); }});
    }
  }
  return probes;
}

class MalformedEnvTest : public ::testing::TestWithParam<size_t> {};

TEST_P(MalformedEnvTest, ParseProcessEnvReturnsAValueOrAnError) {
  const BaseEnv base = BaseEnvs()[GetParam()];
  ASSERT_TRUE(ParseProcessEnv(base.env, base.kind).ok() || base.name.find("read as") != std::string::npos);
  const auto probes = MutatedEnvProbes(base);
  ASSERT_GT(probes.size(), 100u);
  EXPECT_EXIT(RunProbes(probes), ::testing::ExitedWithCode(0), "") << base.name;
}

INSTANTIATE_TEST_SUITE_P(Envs, MalformedEnvTest, ::testing::Range(size_t{0}, BaseEnvs().size()),
                         [](const ::testing::TestParamInfo<size_t>& case_info) {
                           std::string name = BaseEnvs()[case_info.param].name;
                           for (char& c : name) if (c == ' ') c = '_';
                           return name;
                         });

// A Paddle < 2.2 style env (no PADDLE_DISTRI_BACKEND) with an empty FLAGS_selected_gpus once
// crashed the parser while it built the error message.
TEST(MalformedInput, EmptyGpuFlagWithoutBackendIsAnErrorNotACrash) {
  EnvMap env = EnvOf(MustBuild(BuildCollectiveTopology(CollectiveTwoNodesNproc2Layout())), Role::kTrainer, 0);
  env.erase("PADDLE_DISTRI_BACKEND");
  env["FLAGS_selected_gpus"] = "";
  EXPECT_EXIT(RunProbes({{"collective env, no backend, FLAGS_selected_gpus=''", [env] {
                            auto parsed = ParseProcessEnv(env, RoleMakerKind::kCollective);
                            return parsed.ok() ? std::string("accepted an empty FLAGS_selected_gpus") : Check(parsed);
                          }}}),
              ::testing::ExitedWithCode(0), "");
}

// A huge TRAINER_PORTS_NUM once overflowed the port-range check and led to building 2^31
// endpoints per node.
TEST(MalformedInput, HugePortsPerNodeIsAnErrorNotARunawayAllocation) {
  const EnvMap env = {{"PADDLE_TRAINERS", "10.0.0.1,10.0.0.2"}, {"POD_IP", "10.0.0.1"}, {"PADDLE_TRAINER_ID", "0"},
                      {"TRAINER_PORTS_NUM", "2147483647"}, {"PADDLE_TRAINERS_NUM", "2"}};
  EXPECT_EXIT(RunProbes({{"TRAINER_PORTS_NUM=2147483647 with default ports", [env]() -> std::string {
                            auto detected = DetectClusterEnv(env);
                            if (!detected) return "not detected";
                            if (detected->ok()) return "accepted";
                            const std::string want = "PADDLE_PORT 6170 + TRAINER_PORTS_NUM runs past port 65535";
                            return detected->error() == want ? "" : "error was: " + detected->error();
                          }}}),
              ::testing::ExitedWithCode(0), "");
}

TEST(MalformedInput, ClusterDetectionReturnsNothingAValueOrAnError) {
  const EnvMap base = {{"PADDLE_TRAINERS", "10.0.0.1,10.0.0.2"}, {"POD_IP", "10.0.0.2"},
                       {"PADDLE_TRAINER_ID", "1"}, {"TRAINER_PORTS_NUM", "2"},
                       {"PADDLE_TRAINERS_NUM", "2"}, {"PADDLE_PORT", "7000"},
                       {"DISTRIBUTED_TRAINER_ENDPOINTS", "10.0.0.1:1,10.0.0.1:2,10.0.0.2:1,10.0.0.2:2"}};
  std::vector<std::pair<std::string, Probe>> probes;
  for (const bool with_endpoints : {true, false}) {
    for (const auto& entry : base) {
      for (const std::string& g : Garbage()) {
        EnvMap env = base;
        if (!with_endpoints) env.erase("DISTRIBUTED_TRAINER_ENDPOINTS");
        env[entry.first] = g;
        probes.push_back({std::string(with_endpoints ? "" : "default ports, ") + entry.first + "=" + Describe(g), [env] {
                            auto detected = DetectClusterEnv(env);
                            return detected ? Check(*detected) : std::string();
                          }});
      }
    }
  }
  EXPECT_EXIT(RunProbes(probes), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace fleet

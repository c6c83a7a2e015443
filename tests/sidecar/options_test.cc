// fleet-sidecar's command line: what the pod builder emits parses; every mistake is one line
// naming the flag.
#include "fleet/sidecar/options.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace fleet::sidecar {
namespace {

using std::chrono::milliseconds;

std::vector<std::string> PodBuilderArgs() {
  // As operator/src/pod_builder.cc's SidecarContainer writes them.
  return {"gate", "--namespace=team-a", "--job=mnist", "--pod=mnist-worker-1", "--role=worker", "--run=3",
          "--config-map=mnist-endpoints", "--metrics-port=9090"};
}

std::vector<std::string> With(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::vector<std::string> Without(std::vector<std::string> args, const std::string& prefix) {
  args.erase(std::remove_if(args.begin(), args.end(), [&](const std::string& a) { return a.rfind(prefix, 0) == 0; }),
             args.end());
  return args;
}

std::vector<std::string> Replace(std::vector<std::string> args, const std::string& prefix, const std::string& arg) {
  for (std::string& a : args) {
    if (a.rfind(prefix, 0) == 0) a = arg;
  }
  return args;
}

TEST(SidecarOptionsTest, ParsesWhatThePodBuilderEmits) {
  auto cl = ParseCommandLine(PodBuilderArgs(), {{"POD_IP", "10.1.2.3"}});
  ASSERT_TRUE(cl.ok()) << cl.error();
  ASSERT_EQ(cl->command, Command::kGate);
  const GateOptions& o = cl->gate;
  EXPECT_EQ(o.ns, "team-a");
  EXPECT_EQ(o.job, "mnist");
  EXPECT_EQ(o.pod, "mnist-worker-1");
  EXPECT_EQ(o.role, "worker");
  EXPECT_EQ(o.run, 3);
  EXPECT_EQ(o.config_map, "mnist-endpoints");
  EXPECT_EQ(o.metrics_port, 9090);
  EXPECT_FALSE(o.exit_when_ready);
  EXPECT_EQ(o.listen, "10.1.2.3:9090");  // the pod's own address only
  EXPECT_EQ(o.kubeconfig, "");
  EXPECT_EQ(o.mode, "");
  EXPECT_EQ(o.server_connect_timeout, milliseconds(1000));

  cl = ParseCommandLine(With(PodBuilderArgs(), {"--exit-when-ready"}), {});
  ASSERT_TRUE(cl.ok()) << cl.error();
  EXPECT_TRUE(cl->gate.exit_when_ready);
  EXPECT_EQ(cl->gate.listen, "127.0.0.1:9090");  // no POD_IP
  EXPECT_FALSE(cl->gate.in_place);

  // An InPlace job's sidecar.
  cl = ParseCommandLine(With(PodBuilderArgs(), {"--in-place", "--report-http=127.0.0.1:9091"}), {});
  ASSERT_TRUE(cl.ok()) << cl.error();
  EXPECT_TRUE(cl->gate.in_place);
}

TEST(SidecarOptionsTest, OptionalFlags) {
  auto cl = ParseCommandLine(With(PodBuilderArgs(), {"--kubeconfig=/tmp/kc", "--listen", "0.0.0.0:0", "--mode=ps",
                                                     "--server-connect-timeout=250ms", "--server-retry-max=5s",
                                                     "--api-timeout=3s", "--api-retry-max=750ms", "--watch-timeout=1m",
                                                     "--exit-when-ready=false"}),
                             {{"POD_IP", "10.1.2.3"}});
  ASSERT_TRUE(cl.ok()) << cl.error();
  const GateOptions& o = cl->gate;
  EXPECT_EQ(o.kubeconfig, "/tmp/kc");
  EXPECT_EQ(o.listen, "0.0.0.0:0");
  EXPECT_EQ(o.mode, "ps");
  EXPECT_EQ(o.server_connect_timeout, milliseconds(250));
  EXPECT_EQ(o.server_retry_max, milliseconds(5000));
  EXPECT_EQ(o.api_timeout, milliseconds(3000));
  EXPECT_EQ(o.api_retry_max, milliseconds(750));
  EXPECT_EQ(o.watch_timeout, std::chrono::seconds(60));
  EXPECT_FALSE(o.exit_when_ready);
}

TEST(SidecarOptionsTest, DefaultListenAddress) {
  EXPECT_EQ(DefaultListenAddress({}, 80), "127.0.0.1:80");
  EXPECT_EQ(DefaultListenAddress({{"POD_IP", ""}}, 80), "127.0.0.1:80");
  EXPECT_EQ(DefaultListenAddress({{"POD_IP", "10.0.0.7"}}, 9090), "10.0.0.7:9090");
  EXPECT_EQ(DefaultListenAddress({{"POD_IP", "fd00::7"}}, 9090), "[fd00::7]:9090");
}

TEST(SidecarOptionsTest, Help) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--help"}, {"-h"}, {"help"}, {"gate", "--help"}, With(PodBuilderArgs(), {"-h"})}) {
    auto cl = ParseCommandLine(args, {});
    ASSERT_TRUE(cl.ok()) << args[0] << ": " << cl.error();
    EXPECT_EQ(cl->command, Command::kHelp);
  }
  EXPECT_NE(Usage().find("--exit-when-ready"), std::string::npos);
  EXPECT_NE(Usage().find("/startup"), std::string::npos);
}

// Each bad command line fails with a message naming `fragment` (the flag), on one line.
TEST(SidecarOptionsTest, ErrorsNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "no command given"},
      {{"serve"}, "unknown command \"serve\""},
      {Without(PodBuilderArgs(), "--run="), "--run"},
      {Without(PodBuilderArgs(), "--namespace="), "--namespace"},
      {Without(PodBuilderArgs(), "--metrics-port="), "--metrics-port"},
      {Without(PodBuilderArgs(), "--config-map="), "--config-map"},
      {Without(PodBuilderArgs(), "--role="), "--role"},
      {Without(PodBuilderArgs(), "--pod="), "--pod"},
      {Without(PodBuilderArgs(), "--job="), "--job"},
      {Replace(PodBuilderArgs(), "--run=", "--run=abc"), "--run"},
      {Replace(PodBuilderArgs(), "--run=", "--run=-1"), "--run"},
      {Replace(PodBuilderArgs(), "--run=", "--run="), "--run"},
      {Replace(PodBuilderArgs(), "--metrics-port=", "--metrics-port=0"), "--metrics-port"},
      {Replace(PodBuilderArgs(), "--metrics-port=", "--metrics-port=70000"), "--metrics-port"},
      {Replace(PodBuilderArgs(), "--namespace=", "--namespace=Team_A"), "--namespace"},
      {Replace(PodBuilderArgs(), "--config-map=", "--config-map=a,b"), "--config-map"},
      {Replace(PodBuilderArgs(), "--pod=", "--pod=p q"), "--pod"},
      {Replace(PodBuilderArgs(), "--role=", "--role="), "--role"},
      {With(PodBuilderArgs(), {"--run=4"}), "--run"},
      {With(PodBuilderArgs(), {"--bogus=1"}), "--bogus"},
      {With(PodBuilderArgs(), {"stray"}), "unexpected argument \"stray\""},
      {With(PodBuilderArgs(), {"--listen=nope"}), "--listen"},
      {With(PodBuilderArgs(), {"--listen=1.2.3.4:99999"}), "--listen"},
      {With(PodBuilderArgs(), {"--listen=fd00::1:80"}), "--listen"},
      {With(PodBuilderArgs(), {"--listen"}), "--listen"},
      {With(PodBuilderArgs(), {"--kubeconfig="}), "--kubeconfig"},
      {With(PodBuilderArgs(), {"--mode=hybrid"}), "--mode"},
      {With(PodBuilderArgs(), {"--server-connect-timeout=5"}), "--server-connect-timeout"},
      {With(PodBuilderArgs(), {"--server-connect-timeout=0s"}), "--server-connect-timeout"},
      {With(PodBuilderArgs(), {"--api-timeout=2h"}), "--api-timeout"},
      {With(PodBuilderArgs(), {"--watch-timeout=10ms"}), "--watch-timeout"},
      {With(PodBuilderArgs(), {"--exit-when-ready=yes"}), "--exit-when-ready"},
      {With(PodBuilderArgs(), {"--exit-when-ready", "--exit-when-ready"}), "--exit-when-ready"},
      {With(PodBuilderArgs(), {"--in-place"}), "--in-place: needs --report-http"},
      {With(PodBuilderArgs(), {"--in-place", "--report-http=127.0.0.1:9091", "--exit-when-ready"}), "--in-place"},
      {With(PodBuilderArgs(), {"--in-place=sometimes", "--report-http=127.0.0.1:9091"}), "--in-place"},
  };
  for (const auto& [args, fragment] : cases) {
    std::string joined;
    for (const std::string& a : args) joined += a + " ";
    auto cl = ParseCommandLine(args, {});
    ASSERT_FALSE(cl.ok()) << joined;
    EXPECT_NE(cl.error().find(fragment), std::string::npos) << joined << "-> " << cl.error();
    EXPECT_EQ(cl.error().find('\n'), std::string::npos) << cl.error();
  }
}

// What the operator passes for the agent (docs/sidecar.md, "What the operator passes").
TEST(SidecarOptionsTest, AgentFlagsOfTheGate) {
  auto cl = ParseCommandLine(PodBuilderArgs(), {});
  ASSERT_TRUE(cl.ok()) << cl.error();
  const AgentOptions& d = cl->agent;   // the defaults
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.ranks, 1);
  EXPECT_EQ(d.log_dir, "");
  EXPECT_TRUE(d.log_files.empty());
  EXPECT_EQ(d.stall_window, milliseconds(600000));
  EXPECT_EQ(d.report_http, "");
  EXPECT_EQ(d.report_udp, "");
  EXPECT_EQ(d.main_process, "auto");
  EXPECT_TRUE(d.pod_condition);   // gate: on
  EXPECT_EQ(d.max_line_bytes, 8192u);

  cl = ParseCommandLine(With(PodBuilderArgs(), {"--rank=8", "--ranks=4", "--log-dir=/var/log/fleet/", "--log-file=/a.log",
                                                "--log-file", "/b.log", "--pattern=it (?P<step>\\d+)",
                                                "--pattern=l=(?P<loss>\\S+)", "--stall-window=5m",
                                                "--report-http=127.0.0.1:9090", "--report-udp=[::1]:9090",
                                                "--report-socket=/var/run/fleet/metrics.sock", "--main-process=on",
                                                "--main-process-match=python|fleetrun", "--peer-check-interval=30s",
                                                "--pod-condition=false", "--max-line-bytes=65536",
                                                "--log-poll-interval=1s", "--condition-min-interval=10s"}),
                        {});
  ASSERT_TRUE(cl.ok()) << cl.error();
  const AgentOptions& a = cl->agent;
  EXPECT_EQ(a.rank, 8);
  EXPECT_EQ(a.ranks, 4);
  EXPECT_EQ(a.log_dir, "/var/log/fleet");
  EXPECT_EQ(a.log_files, (std::vector<std::string>{"/a.log", "/b.log"}));
  EXPECT_EQ(a.patterns.size(), 2u);
  EXPECT_EQ(a.stall_window, milliseconds(300000));
  EXPECT_EQ(a.report_http, "127.0.0.1:9090");
  EXPECT_EQ(a.report_udp, "[::1]:9090");
  EXPECT_EQ(a.report_socket, "/var/run/fleet/metrics.sock");
  EXPECT_EQ(a.main_process, "on");
  EXPECT_EQ(a.main_process_match, "python|fleetrun");
  EXPECT_EQ(a.peer_check_interval, milliseconds(30000));
  EXPECT_FALSE(a.pod_condition);
  EXPECT_EQ(a.max_line_bytes, 65536u);
  EXPECT_EQ(a.log_poll_interval, milliseconds(1000));
  EXPECT_EQ(a.condition_min_interval, milliseconds(10000));

  cl = ParseCommandLine(With(PodBuilderArgs(), {"--stall-window=0", "--report-http=off"}), {});
  ASSERT_TRUE(cl.ok()) << cl.error();
  EXPECT_EQ(cl->agent.stall_window, milliseconds(0));
  EXPECT_EQ(cl->agent.report_http, "");
  for (const char* off : {"0s", "0ms", "00m", "off"}) {
    cl = ParseCommandLine(With(PodBuilderArgs(), {std::string("--stall-window=") + off}), {});
    ASSERT_TRUE(cl.ok()) << off << ": " << cl.error();
    EXPECT_EQ(cl->agent.stall_window, milliseconds(0)) << off;
  }
  EXPECT_FALSE(ParseCommandLine(With(PodBuilderArgs(), {"--stall-window=0x"}), {}).ok());
  EXPECT_FALSE(ParseCommandLine(With(PodBuilderArgs(), {"--stall-window=500ms"}), {}).ok());
}

TEST(SidecarOptionsTest, TheAgentSubcommand) {
  auto cl = ParseCommandLine({"agent", "--job=local", "--role=worker", "--metrics-port=9100", "--log-dir=log", "--ranks=2"},
                             {{"HOSTNAME", "laptop"}});
  ASSERT_TRUE(cl.ok()) << cl.error();
  EXPECT_EQ(cl->command, Command::kAgent);
  EXPECT_EQ(cl->gate.ns, "default");
  EXPECT_EQ(cl->gate.pod, "laptop");
  EXPECT_EQ(cl->gate.listen, "127.0.0.1:9100");
  EXPECT_FALSE(cl->agent.pod_condition);   // agent: off
  cl = ParseCommandLine({"agent", "--job=local", "--role=worker", "--metrics-port=9100"}, {{"POD_NAME", "j-worker-3"}});
  ASSERT_TRUE(cl.ok()) << cl.error();
  EXPECT_EQ(cl->gate.pod, "j-worker-3");
  EXPECT_EQ(ParseCommandLine({"agent", "--help"}, {})->command, Command::kHelp);
  EXPECT_NE(Usage().find("fleet-sidecar agent"), std::string::npos);
}

TEST(SidecarOptionsTest, AgentErrorsNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {With(PodBuilderArgs(), {"--rank=-1"}), "--rank"},
      {With(PodBuilderArgs(), {"--ranks=5000"}), "--ranks"},
      {With(PodBuilderArgs(), {"--log-dir="}), "--log-dir"},
      {With(PodBuilderArgs(), {"--log-file="}), "--log-file"},
      {With(PodBuilderArgs(), {"--pattern=(?P<loss>"}), "--pattern"},
      {With(PodBuilderArgs(), {"--stall-window=soon"}), "--stall-window"},
      {With(PodBuilderArgs(), {"--report-http=10.1.2.3:9090"}), "--report-http"},
      {With(PodBuilderArgs(), {"--report-udp=localhost"}), "--report-udp"},
      {With(PodBuilderArgs(), {"--report-socket=" + std::string(120, 'a')}), "--report-socket"},
      {With(PodBuilderArgs(), {"--main-process=yes"}), "--main-process"},
      {With(PodBuilderArgs(), {"--main-process-match=[a"}), "--main-process-match"},
      {With(PodBuilderArgs(), {"--peer-check-interval=10ms"}), "--peer-check-interval"},
      {With(PodBuilderArgs(), {"--pod-condition=maybe"}), "--pod-condition"},
      {With(PodBuilderArgs(), {"--log-poll-interval=20s"}), "--log-poll-interval"},
      {With(PodBuilderArgs(), {"--rank=1", "--rank=2"}), "--rank"},
      {{"agent", "--job=j", "--role=w", "--metrics-port=1", "--config-map=c"}, "--config-map is a flag of 'gate'"},
      {{"agent", "--job=j", "--role=w", "--metrics-port=1", "--in-place"}, "--in-place is a flag of 'gate'"},
  };
  for (const auto& [args, fragment] : cases) {
    auto cl = ParseCommandLine(args, {});
    ASSERT_FALSE(cl.ok()) << fragment;
    EXPECT_NE(cl.error().find(fragment), std::string::npos) << cl.error();
    EXPECT_EQ(cl.error().find('\n'), std::string::npos) << cl.error();
  }
  std::vector<std::string> many = PodBuilderArgs();
  for (int i = 0; i < 17; ++i) many.push_back("--log-file=/f" + std::to_string(i));
  EXPECT_FALSE(ParseCommandLine(many, {}).ok());
}

TEST(SidecarOptionsTest, Durations) {
  EXPECT_EQ(*ParseDuration("1ms", "d"), milliseconds(1));
  EXPECT_EQ(*ParseDuration("1500ms", "d"), milliseconds(1500));
  EXPECT_EQ(*ParseDuration("2s", "d"), milliseconds(2000));
  EXPECT_EQ(*ParseDuration("5m", "d"), milliseconds(300000));
  for (const char* bad : {"", "s", "1", "1h", "1.5s", "-1s", "0ms", "99999999999999999999s", "2000m", " 1s"}) {
    EXPECT_FALSE(ParseDuration(bad, "d").ok()) << bad;
  }
}

}  // namespace
}  // namespace fleet::sidecar

// Helpers shared by the parameter-server suites: in-process servers on free ports, clients, temp
// directories, child processes with deadlines.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fleet/ps/client.h"
#include "fleet/ps/server.h"

// A Status that must be OK, with the expression and the status in the failure message.
#define ASSERT_OK(expr)                                     \
  do {                                                      \
    const ::fleet::ps::Status _s = (expr);                  \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)

namespace fleet::ps::testing {

using Clock = std::chrono::steady_clock;

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "fleet-ps-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// n servers of one job, each on 127.0.0.1 with a port the kernel picked.
struct Cluster {
  std::vector<std::unique_ptr<PsServer>> servers;
  std::vector<std::string> endpoints;
};

inline Cluster StartCluster(int n, int trainers, const std::string& model_dir = "",
                            const std::function<void(ServerOptions&)>& tweak = nullptr) {
  Cluster c;
  for (int i = 0; i < n; ++i) {
    ServerOptions o;
    o.bind_address = "127.0.0.1:0";
    o.server_index = i;
    o.server_count = n;
    o.trainers = trainers;
    o.model_dir = model_dir;
    if (tweak) tweak(o);
    std::unique_ptr<PsServer> s;
    Status st = PsServer::Start(o, &s);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) return c;
    c.endpoints.push_back("127.0.0.1:" + std::to_string(s->port()));
    c.servers.push_back(std::move(s));
  }
  return c;
}

inline ClientOptions Options(const std::vector<std::string>& endpoints, int trainer, int trainers) {
  ClientOptions o;
  o.servers = endpoints;
  o.trainer_id = trainer;
  o.trainers = trainers;
  o.connect_timeout = std::chrono::seconds(20);
  o.retry_interval = std::chrono::milliseconds(200);
  o.rpc_timeout = std::chrono::seconds(20);
  o.sync_timeout = std::chrono::seconds(20);
  return o;
}

inline std::unique_ptr<PsClient> Connect(const ClientOptions& o) {
  std::unique_ptr<PsClient> c;
  Status s = PsClient::Connect(o, &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

// Runs fn(trainer) on `n` threads and joins them.
inline void OnThreads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) threads.emplace_back(fn, t);
  for (auto& t : threads) t.join();
}

// Polls `done` every few milliseconds until it holds or the deadline passes.
inline bool PollUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace fleet::ps::testing

#include "fleet/launcher/host.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "fleet/base/strings.h"

namespace fleet::launcher {
namespace {

std::vector<std::string> LocalAddresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
      char text[INET_ADDRSTRLEN];
      auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
      if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) out.emplace_back(text);
    }
    ::freeifaddrs(list);
  }
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0 && name[0]) out.emplace_back(name);
  out.emplace_back("localhost");
  return out;
}

// NVIDIA's driver creates /dev/nvidia<N> per GPU; in a container only the GPUs given to it appear.
int CountGpus() {
  DIR* dev = ::opendir("/dev");
  if (!dev) return 0;
  int count = 0;
  while (dirent* entry = ::readdir(dev)) {
    const char* name = entry->d_name;
    if (std::strncmp(name, "nvidia", 6) != 0 || !name[6]) continue;
    if (std::all_of(name + 6, name + std::strlen(name), [](char c) { return c >= '0' && c <= '9'; })) ++count;
  }
  ::closedir(dev);
  return count;
}

bool IsRegularFile(const std::string& path, int access_mode) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), access_mode) == 0;
}

}  // namespace

Result<std::vector<int>> FindFreePorts(int count) {
  std::vector<int> fds;
  std::vector<int> ports;
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  for (int i = 0; i < count; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      close_all();
      return Error{std::string("cannot create a socket to find a free port: ") + std::strerror(errno)};
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      close_all();
      return Error{std::string("cannot find a free port: ") + std::strerror(errno)};
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  close_all();
  return ports;
}

Result<std::string> ResolveProgram(const std::string& script, const std::string& path_env) {
  const bool python = script.size() > 3 && script.compare(script.size() - 3, 3, ".py") == 0;
  auto on_path = [&](const std::string& name) {
    for (const std::string& dir : SplitString(path_env, ':')) {
      if (IsRegularFile((dir.empty() ? "." : dir) + "/" + name, X_OK)) return true;
    }
    return false;
  };
  if (python) {
    if (!IsRegularFile(script, R_OK)) {
      return Error{"training script '" + script + "' does not exist or is not a readable file"};
    }
    if (!on_path("python3")) return Error{"python3 is not on PATH; it runs the .py training script"};
    return script;
  }
  if (script.find('/') != std::string::npos) {
    if (IsRegularFile(script, X_OK)) return script;
    return Error{"training program '" + script + "' does not exist or is not executable"};
  }
  if (on_path(script)) return script;  // exec'd through PATH, as given
  if (IsRegularFile(script, X_OK)) return "./" + script;
  return Error{"training program '" + script + "' is not a file here and not a command on PATH"};
}

Result<std::string> MakeGlooDir(const EnvMap& env) {
  auto tmp = env.find("TMPDIR");
  std::string dir = (tmp != env.end() && !tmp->second.empty() ? tmp->second : "/tmp") + "/fleetrun-gloo-XXXXXX";
  if (!::mkdtemp(dir.data())) return Error{"cannot create a gloo directory in " + dir + ": " + std::strerror(errno)};
  return dir;
}

void RemoveGlooDir(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  if (error) std::cerr << "fleetrun: WARNING: could not remove " << dir << ": " << error.message() << std::endl;
}

HostFacts ReadHostFacts() {
  HostFacts facts;
  facts.env = CurrentProcessEnv();
  facts.local_addresses = LocalAddresses();
  facts.gpu_count = CountGpus();
  facts.free_ports = FindFreePorts;
  const std::string path = facts.env.count("PATH") ? facts.env.at("PATH") : "/usr/bin:/bin";
  facts.resolve_program = [path](const std::string& script) { return ResolveProgram(script, path); };
  return facts;
}

}  // namespace fleet::launcher

#include "fleet/sidecar/process_watch.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include <re2/re2.h>

#include "fleet/sidecar/user_regex.h"

namespace fleet::sidecar {
namespace {

// Reads at most `limit` bytes of a small file (procfs files have no size).
bool ReadSmall(const std::string& path, std::string* out, size_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->resize(limit);
  size_t got = 0;
  while (got < limit) {
    const ssize_t n = ::read(fd, out->data() + got, limit - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out->resize(got);
  return true;
}

std::string_view Basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// The first `limit` bytes of `text`, without the UTF-8 character the cut would split (a command
// line is any bytes; this keeps a Chinese path's last character whole or out; what is not UTF-8 at
// all is replaced where the text is written as JSON).
std::string_view CutAtCharacter(std::string_view text, size_t limit) {
  if (text.size() <= limit) return text;
  auto continuation = [&](size_t i) { return (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80; };
  size_t cut = limit;
  while (cut > 0 && limit - cut < 3 && continuation(cut)) --cut;
  return text.substr(0, continuation(cut) ? limit : cut);
}

}  // namespace

std::optional<ProcStat> ReadProcStat(const std::string& proc, pid_t pid) {
  std::string stat;
  if (!ReadSmall(proc + "/" + std::to_string(pid) + "/stat", &stat, 1024)) return std::nullopt;
  // "pid (comm) S ppid ... starttime(22nd)": comm may hold spaces and parentheses; the last ')' ends it.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return std::nullopt;
  ProcStat out;
  out.state = stat[close + 2];
  const char* const end = stat.data() + stat.size();
  // Fields after comm: 3 = state, 4 = ppid ... 22 = starttime.
  size_t i = close + 2;
  for (int field = 3; field < 22 && i != std::string::npos; ++field) {
    i = stat.find(' ', i + 1);
    if (field == 3 && i != std::string::npos) std::from_chars(stat.data() + i + 1, end, out.ppid);
  }
  if (i == std::string::npos) return std::nullopt;
  if (std::from_chars(stat.data() + i + 1, end, out.start_time).ec != std::errc()) return std::nullopt;
  return out;
}

MainProcessWatcher::MainProcessWatcher(std::string proc, const std::string& match, pid_t self)
    : proc_(std::move(proc)), self_(self) {
  if (match.empty()) return;
  auto compiled = CompileUserRegex(match);
  if (!compiled) throw std::invalid_argument("--main-process-match: not a valid regular expression: " + compiled.error());
  match_ = *compiled;
}

bool MainProcessWatcher::Enabled(MainProcessMode mode, const std::string& proc) {
  if (mode != MainProcessMode::kAuto) return mode == MainProcessMode::kOn;
  std::string cmdline;
  if (!ReadSmall(proc + "/1/cmdline", &cmdline, 4096)) return false;
  const std::string argv0 = cmdline.substr(0, cmdline.find('\0'));
  return Basename(argv0) == "pause";
}

std::optional<MainProcessWatcher::Candidate> MainProcessWatcher::Read(pid_t pid) const {
  const std::string dir = proc_ + "/" + std::to_string(pid);
  const std::optional<ProcStat> stat = ReadProcStat(proc_, pid);
  if (!stat || stat->Ended()) return std::nullopt;
  Candidate c;
  c.pid = pid;
  c.start_time = stat->start_time;
  std::string cmdline;
  if (!ReadSmall(dir + "/cmdline", &cmdline, 4096)) return std::nullopt;
  while (!cmdline.empty() && cmdline.back() == '\0') cmdline.pop_back();
  if (cmdline.empty()) return std::nullopt;  // a kernel thread, or one that is exiting
  const std::string argv0 = cmdline.substr(0, cmdline.find('\0'));
  if (Basename(argv0) == "fleet-sidecar") return std::nullopt;
  for (char& ch : cmdline) {
    if (ch == '\0') ch = ' ';
  }
  if (match_ && !re2::RE2::PartialMatch(cmdline, *match_)) return std::nullopt;
  c.command = cmdline.size() > kCommandBytes ? std::string(CutAtCharacter(cmdline, kCommandBytes)) + "..." : cmdline;
  return c;
}

std::optional<MainProcessWatcher::Candidate> MainProcessWatcher::Scan() const {
  DIR* dir = ::opendir(proc_.c_str());
  if (!dir) return std::nullopt;
  std::optional<Candidate> best;
  while (const dirent* entry = ::readdir(dir)) {
    pid_t pid = 0;
    const char* name = entry->d_name;
    const size_t length = std::strlen(name);
    auto [ptr, ec] = std::from_chars(name, name + length, pid);
    if (ec != std::errc() || ptr != name + length || pid <= 1 || pid == self_) continue;
    auto c = Read(pid);
    if (!c) continue;
    if (!best || c->start_time < best->start_time || (c->start_time == best->start_time && c->pid < best->pid)) {
      best = std::move(c);
    }
  }
  ::closedir(dir);
  return best;
}

MainProcessObservation MainProcessWatcher::Check() {
  MainProcessObservation o;
  if (current_) {
    auto again = Read(current_->pid);
    if (again && again->start_time == current_->start_time) {
      o.running = true;
      o.pid = current_->pid;
      o.command = current_->command;
      return o;
    }
    current_.reset();
  }
  current_ = Scan();
  if (!current_) return o;
  o.running = true;
  o.pid = current_->pid;
  o.command = current_->command;
  o.restarted = seen_;
  seen_ = true;
  return o;
}

}  // namespace fleet::sidecar

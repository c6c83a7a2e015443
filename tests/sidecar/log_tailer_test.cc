// LogTailer on real files: backlog then live lines, partial lines, truncation, rotation, bounded
// lines, and fleetrun's log directory.
#include "fleet/sidecar/log_tailer.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "fake_apiserver_fixture.h"

namespace fleet::sidecar {
namespace {

using kube::testing::TempDir;

struct Seen {
  int rank_offset;
  std::string line;
  bool live;
};

class LogTailerTest : public ::testing::Test {
 protected:
  std::vector<Seen> Poll(LogTailer& tailer) {
    std::vector<Seen> seen;
    while (tailer.Poll([&](int offset, const std::vector<std::string_view>& lines, bool live) {
      for (std::string_view l : lines) seen.push_back({offset, std::string(l), live});
    })) {
    }
    return seen;
  }
  static std::vector<std::string> Lines(const std::vector<Seen>& seen) {
    std::vector<std::string> out;
    for (const Seen& s : seen) out.push_back(s.line);
    return out;
  }
  void Append(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::app | std::ios::binary);
    out << text;
  }
  TempDir dir_;
};

TEST_F(LogTailerTest, ReadsTheBacklogThenFollowsNewLines) {
  const std::string path = dir_.Write("train.log", "one\ntwo\r\nthree");
  LogTailerOptions options;
  options.files = {path, dir_.path() + "/later.log"};
  LogTailer tailer(options);
  std::vector<Seen> seen = Poll(tailer);
  EXPECT_EQ(Lines(seen), (std::vector<std::string>{"one", "two"}));  // "three" waits for its newline
  EXPECT_FALSE(seen[0].live);                                        // written before: a backlog
  EXPECT_EQ(tailer.files_open(), 1u);

  Append(path, " more\nfour\n");
  seen = Poll(tailer);
  EXPECT_EQ(Lines(seen), (std::vector<std::string>{"three more", "four"}));
  EXPECT_TRUE(seen[0].live);
  EXPECT_TRUE(Poll(tailer).empty());

  dir_.Write("later.log", "appeared\n");  // a file that appears later is followed, live
  seen = Poll(tailer);
  ASSERT_EQ(Lines(seen), (std::vector<std::string>{"appeared"}));
  EXPECT_TRUE(seen[0].live);
  EXPECT_EQ(tailer.stats().lines, 5u);
}

// A progress bar rewrites its line with '\r': each state is a line, as a terminal shows it (a
// pattern's '.' must not run across them); "\r\n" ends one line.
TEST_F(LogTailerTest, CarriageReturnsEndLinesAsOnATerminal) {
  const std::string path = dir_.Write("train.log", "step 1 loss=0.5\rstep 2 loss=0.4\r\nwin\r\n\nlast\r\r\n");
  LogTailerOptions options;
  options.files = {path};
  LogTailer tailer(options);
  EXPECT_EQ(Lines(Poll(tailer)), (std::vector<std::string>{"step 1 loss=0.5", "step 2 loss=0.4", "win", "", "last"}));
}

TEST_F(LogTailerTest, TruncationStartsOver) {
  const std::string path = dir_.Write("train.log", "a\nb\nc\n");
  LogTailerOptions options;
  options.files = {path};
  LogTailer tailer(options);
  EXPECT_EQ(Poll(tailer).size(), 3u);
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);   // copytruncate
  Append(path, "d\n");
  EXPECT_EQ(Lines(Poll(tailer)), (std::vector<std::string>{"d"}));
  EXPECT_EQ(tailer.stats().truncations, 1u);
}

TEST_F(LogTailerTest, RotationFinishesTheOldFileThenFollowsTheNewOne) {
  const std::string path = dir_.Write("train.log", "a\n");
  LogTailerOptions options;
  options.files = {path};
  LogTailer tailer(options);
  EXPECT_EQ(Poll(tailer).size(), 1u);
  // The writer appends, then the file is renamed away: its last lines are read from the open file.
  Append(path, "b\nlast without newline");
  ASSERT_EQ(std::rename(path.c_str(), (path + ".1").c_str()), 0);
  Append(path + ".1", "\n");  // still writing to the old file
  EXPECT_EQ(Lines(Poll(tailer)), (std::vector<std::string>{"b", "last without newline"}));
  Append(path + ".1", "c\n");
  dir_.Write("train.log", "new 1\nnew 2\n");
  EXPECT_EQ(Lines(Poll(tailer)), (std::vector<std::string>{"c", "new 1", "new 2"}));
  EXPECT_EQ(tailer.stats().rotations, 1u);
  Append(path, "new 3\n");
  EXPECT_EQ(Lines(Poll(tailer)), (std::vector<std::string>{"new 3"}));
}

TEST_F(LogTailerTest, LinesOverTheLimitAreSkippedNeverBufferedWhole) {
  const std::string path = dir_.Write("train.log", "");
  LogTailerOptions options;
  options.files = {path};
  options.max_line_bytes = 64;
  options.read_bytes = 4096;
  LogTailer tailer(options);
  Poll(tailer);
  const std::string huge(100000, 'x');   // over many reads
  Append(path, "short\n" + std::string(65, 'y') + "\n" + huge + "\nafter\n" + std::string(64, 'z') + "\n");
  EXPECT_EQ(Lines(Poll(tailer)), (std::vector<std::string>{"short", "after", std::string(64, 'z')}));
  EXPECT_EQ(tailer.stats().long_lines, 2u);
  // A long line still being written, then its end.
  Append(path, std::string(5000, 'w'));
  EXPECT_TRUE(Poll(tailer).empty());
  Append(path, "www\nok\n");
  EXPECT_EQ(Lines(Poll(tailer)), (std::vector<std::string>{"ok"}));
  EXPECT_EQ(tailer.stats().long_lines, 3u);
}

TEST_F(LogTailerTest, FollowsFleetrunsLogDirectory) {
  EXPECT_EQ(LogTailer::DirRankOffset("workerlog.0"), 0);
  EXPECT_EQ(LogTailer::DirRankOffset("serverlog.12"), 12);
  EXPECT_EQ(LogTailer::DirRankOffset("heterlog.3"), 3);
  for (const char* name : {"endpoints.log", "workerlog.", "workerlog.x", "workerlog.0.1", "workerlog.12345",
                           "xworkerlog.1"}) {
    EXPECT_EQ(LogTailer::DirRankOffset(name), -1) << name;
  }
  LogTailerOptions options;
  options.dir = dir_.path() + "/log";   // does not exist yet: fleetrun makes it
  LogTailer tailer(options);
  EXPECT_TRUE(Poll(tailer).empty());
  dir_.Write("log/workerlog.0", "w0 a\n");
  dir_.Write("log/workerlog.2", "w2 a\n");
  dir_.Write("log/endpoints.log", "PADDLE_TRAINER_ENDPOINTS: \n");
  std::map<int, std::vector<std::string>> by_rank;
  for (const Seen& s : Poll(tailer)) by_rank[s.rank_offset].push_back(s.line);
  EXPECT_EQ(by_rank, (std::map<int, std::vector<std::string>>{{0, {"w0 a"}}, {2, {"w2 a"}}}));
  EXPECT_EQ(tailer.files_open(), 2u);
}

// The operator names paddle.distributed.launch's logs one by one (--log-file=DIR/workerlog.i, for
// each local process i) before the launcher has created them; the launcher restarts its processes
// by opening the same names again: appending (its default), truncating (--log_overwrite), or after
// the files were removed (a new container's emptyDir is kept, its files may not be).
TEST_F(LogTailerTest, FollowsTheLaunchersNamedLogsThroughRestarts) {
  const std::string dir = dir_.path() + "/log";
  LogTailerOptions options;
  options.ranks = 3;
  for (int i = 0; i < 3; ++i) options.files.push_back(dir + "/workerlog." + std::to_string(i));
  options.files.push_back(dir_.path() + "/train.log");   // any other name: the pod's first rank
  LogTailer tailer(options);
  EXPECT_TRUE(Poll(tailer).empty());
  EXPECT_EQ(tailer.files_open(), 0u);
  auto by_rank = [&] {
    std::map<int, std::vector<std::string>> out;
    for (const Seen& s : Poll(tailer)) {
      EXPECT_TRUE(s.live) << s.line << ": a file that appears after the start holds new lines";
      out[s.rank_offset].push_back(s.line);
    }
    return out;
  };
  using ByRank = std::map<int, std::vector<std::string>>;

  // The launcher starts its processes: the directory and the files appear.
  dir_.Write("log/workerlog.0", "w0 run1 a\n");
  dir_.Write("log/workerlog.2", "w2 run1 a\n");
  dir_.Write("train.log", "t a\n");
  EXPECT_EQ(by_rank(), (ByRank{{0, {"w0 run1 a", "t a"}}, {2, {"w2 run1 a"}}}));
  dir_.Write("log/workerlog.1", "w1 run1 a\n");
  Append(dir + "/workerlog.0", "w0 run1 b\n");
  EXPECT_EQ(by_rank(), (ByRank{{0, {"w0 run1 b"}}, {1, {"w1 run1 a"}}}));
  EXPECT_EQ(tailer.files_open(), 4u);

  // A restart appending to the same files: only the new lines.
  Append(dir + "/workerlog.1", "w1 run2 a\n");
  EXPECT_EQ(by_rank(), (ByRank{{1, {"w1 run2 a"}}}));

  // A restart with --log_overwrite: the file is truncated, then written from its start.
  std::ofstream(dir + "/workerlog.0", std::ios::binary | std::ios::trunc) << "w0 r3\n";
  EXPECT_EQ(by_rank(), (ByRank{{0, {"w0 r3"}}}));
  EXPECT_EQ(tailer.stats().truncations, 1u);

  // The files removed and created again: the new files from their start.
  ASSERT_EQ(::unlink((dir + "/workerlog.2").c_str()), 0);
  EXPECT_EQ(by_rank(), ByRank{});
  dir_.Write("log/workerlog.2", "w2 run4 a\n");
  EXPECT_EQ(by_rank(), (ByRank{{2, {"w2 run4 a"}}}));
  EXPECT_EQ(tailer.stats().rotations, 1u);

  // A pod of one rank has no other: whatever its file's name (a parameter-server trainer's
  // workerlog.2, named after its global index), its lines are that rank's.
  LogTailerOptions one_rank;
  one_rank.files = {dir + "/workerlog.2"};
  LogTailer single(one_rank);
  const std::vector<Seen> seen = Poll(single);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].rank_offset, 0);
}

}  // namespace
}  // namespace fleet::sidecar

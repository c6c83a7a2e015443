// The dense transport (internal): DenseStream's messages over plain TCP connections, without HTTP/2
// and without gRPC's threads.
//
// Why: a small dense table's push + pull is a few dozen microseconds of real work, and gRPC spent
// about three times that per message on thread hand-offs, flow-control writes and wake-ups (perf:
// kernel 46%, gRPC's transport 18%; docs/runtime.md, Transport). Here a calling thread writes its
// requests and reads the answers itself (poll), and each connection has one server thread that
// reads a request, applies it and writes the answer: a message costs a send and a receive on each
// end, as in a plain TCP copy.
//
// It shares the server's one port with gRPC: the server accepts every connection itself, and one
// that starts with kPreface is a dense connection; anything else is handed to gRPC as it is (the
// HTTP/2 preface, or garbage that gRPC refuses).
//
// On a dense connection, after the preface, each message is framed as gRPC frames it (a zero byte,
// then the length as a big-endian uint32, then the bytes): requests are DenseRequest and answers
// DenseAnswer (fleet_ps.proto), one answer per request, in order. A request that does not decode, or
// a frame over the limit, gets an answer with the error and the connection is closed.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codec.h"
#include "fleet/base/fd.h"
#include "fleet/ps/server.h"
#include "fleet/ps/status.h"

namespace grpc {
class Server;
}

namespace fleet::ps {

// One dense request, whichever transport brought it (server.cc): a push (answered when applied: at
// once, or for a sync table when the step completes, from the thread that completes it), a pull, or
// a push and then a pull of the range it pushed. Pulled values go where `out` says. The pushed
// values are read from the request's bytes, which must stay until `done`.
void ServeDense(ServerCore& core, const codec::Dense& m, const ServerCore::Allocate& out, Done done);

namespace bulk {

inline constexpr char kPreface[] = "FLEET-PS-DENSE/1";
inline constexpr size_t kPrefaceBytes = sizeof(kPreface) - 1;
inline constexpr size_t kFrameHeaderBytes = 5;

// "host:port" or "[v6]:port" (what dense connections connect to).
Status CheckAddress(const std::string& address);

// The largest frame either end accepts: a message under the limit, and the fields around it.
inline size_t FrameLimit(size_t max_message_bytes) { return max_message_bytes + (64u << 10); }

// The server's side: listens on the server's address, sorts connections, hands gRPC's to grpc_server
// and serves the dense ones, a thread each.
class Acceptor {
 public:
  // Binds and listens ("host:port", "[v6]:port"; port 0 picks one); serving starts with Start.
  static Status Listen(const std::string& address, std::unique_ptr<Acceptor>* out);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  int port() const { return port_; }
  // Limits from `options`: max_message_bytes and the dense connection limits.
  void Start(ServerCore* core, grpc::Server* grpc_server, const ServerOptions& options);
  // Dense connections being served now.
  size_t open_connections() const;
  // Stops accepting, closes the dense connections and waits for their threads (a thread still
  // applying a request finishes it first). Connections already handed to gRPC are gRPC's.
  void Shutdown();

 private:
  Acceptor() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// The trainer's side: one calling thread's dense connections to the servers (up to kPerServer per
// server, each with one request in flight, opened on first use), kept between calls in PsClient's
// pool. A connection that fails is closed and dropped; the next call opens a new one.
class Connections {
 public:
  static constexpr size_t kPerServer = 4;

  Connections(const std::vector<std::string>& servers, size_t max_message_bytes);
  ~Connections();
  Connections(const Connections&) = delete;
  Connections& operator=(const Connections&) = delete;

  // Request i: to server server_of(i), made by build(i) (its slices must stay until Run returns);
  // its answer is expected to be about answer_bytes(i) bytes (a hint: it sizes the receive buffer).
  // consume(i, answer) gets each answer once its request is fully sent too (so an answer may go into
  // the buffer its request came from). A server's requests go in order over its connections.
  // Returns the first failure: an answer's (the connection goes on) or a connection's (it is
  // closed), named by annotate(server, status); after a failure no more requests start.
  struct Request {
    std::function<int(size_t)> server_of;
    std::function<grpc::ByteBuffer(size_t)> build;
    std::function<size_t(size_t)> answer_bytes;
    std::function<Status(size_t, const grpc::ByteBuffer&)> consume;
    std::function<Status(int, const Status&)> annotate;
  };
  Status Run(size_t count, std::chrono::milliseconds timeout, const Request& request);

 private:
  struct Conn;
  struct Call;  // one Run's request, timeout and first failure
  void DropClosed();
  void Launch(Call& call, size_t slot);
  void Drive(Call& call);
  void Send(Call& call, size_t slot);
  void Receive(Call& call, size_t slot);
  void Finish(Call& call, size_t slot);
  // Closes the slot's connection; the first failure is the one Run returns.
  void Fail(Call& call, size_t slot, const Status& why);
  std::vector<std::string> servers_;
  size_t frame_limit_;
  std::vector<std::unique_ptr<Conn>> conns_;  // server s's at [s * kPerServer, (s + 1) * kPerServer)
  // Run's working buffers, kept between calls.
  std::vector<std::vector<size_t>> queue_;
  std::vector<size_t> taken_;
  std::vector<pollfd> fds_;
  std::vector<size_t> slots_;
};

}  // namespace bulk
}  // namespace fleet::ps

// Conversions between the library's types and the generated protocol types (internal).
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "fleet/ps/config.h"
#include "fleet/ps/status.h"
#include "fleet_ps.grpc.pb.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the parameter server's wire format and checkpoints are little-endian; this machine is not"
#endif

namespace fleet::ps {

// Process-wide, once, by servers and clients: keeps the large buffers gRPC and protobuf allocate for
// each message in the heap between messages (glibc would otherwise map and unmap them, paying a page
// fault per 4 KiB every time: a third of the time of a 4 MiB push; FLEET_PS_MALLOC_TUNING=0 leaves
// glibc's defaults), and turns off Abseil's debug-build mutex deadlock detection (tuning.cc).
void TuneProcessOnce();

// HTTP/2 settings for bulk transfers, on both ends: a stream may have a whole chunk in flight
// (no window-update round trips inside one message), and frames are large.
template <typename Args>
void SetTransferArgs(Args& args, size_t max_message_bytes) {
  const int window = static_cast<int>(std::min<size_t>(max_message_bytes + (1u << 20), 1u << 30));
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, window);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (1 << 24) - 1);
  // Read in large pieces (gRPC starts at 8 KiB per read).
  args.SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, 1 << 20);
  args.SetInt(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 64 << 10);
  args.SetInt(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 4 << 20);
}

inline grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(s.code())), s.message());
}

inline Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return Status::Ok();
  return Status(static_cast<Code>(static_cast<int>(s.error_code())), s.error_message());
}

inline void ToWire(const TableConfig& c, wire::TableConfig* w) {
  w->set_table_id(c.table_id);
  w->set_kind(c.kind == TableKind::kDense ? wire::TableConfig::DENSE : wire::TableConfig::SPARSE);
  w->set_size(c.size);
  w->set_dim(c.dim);
  wire::OptimizerConfig* o = w->mutable_optimizer();
  o->set_kind(static_cast<wire::OptimizerKind>(static_cast<int>(c.optimizer.kind)));
  o->set_learning_rate(c.optimizer.learning_rate);
  o->set_beta1(c.optimizer.beta1);
  o->set_beta2(c.optimizer.beta2);
  o->set_epsilon(c.optimizer.epsilon);
  o->set_initial_accumulator(c.optimizer.initial_accumulator);
  w->set_mode(static_cast<wire::Mode>(static_cast<int>(c.mode)));
  w->set_k_steps(c.k_steps);
  w->set_init_range(c.init_range);
  w->set_seed(c.seed);
  w->set_max_rows(c.max_rows);
}

// Unknown enum values stay out of range here and are refused by ValidateTableConfig.
inline TableConfig FromWire(const wire::TableConfig& w) {
  TableConfig c;
  c.table_id = w.table_id();
  c.kind = static_cast<TableKind>(static_cast<int>(w.kind()));
  c.size = w.size();
  c.dim = w.dim();
  c.optimizer.kind = static_cast<OptimizerKind>(static_cast<int>(w.optimizer().kind()));
  c.optimizer.learning_rate = w.optimizer().learning_rate();
  c.optimizer.beta1 = w.optimizer().beta1();
  c.optimizer.beta2 = w.optimizer().beta2();
  c.optimizer.epsilon = w.optimizer().epsilon();
  c.optimizer.initial_accumulator = w.optimizer().initial_accumulator();
  c.mode = static_cast<Mode>(static_cast<int>(w.mode()));
  c.k_steps = w.k_steps();
  c.init_range = w.init_range();
  c.seed = w.seed();
  c.max_rows = w.max_rows();
  return c;
}

}  // namespace fleet::ps

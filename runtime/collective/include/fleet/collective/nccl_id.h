// The NCCL unique-id exchange of Paddle's c_gen_nccl_id (paddle/fluid/platform/gen_comm_id_helper.cc),
// wire-compatible with it, so that our ranks and Paddle's can bootstrap one communicator:
//   - every rank other than 0 listens on its own endpoint (PADDLE_CURRENT_ENDPOINT, all addresses);
//   - rank 0 connects to each of them and sends an 8-byte head {int32 version = 1; int32 ring_id}
//     in host byte order; the receiver echoes the head back when it matches its own;
//   - rank 0 then sends the ids, 128 bytes each (NCCL_UNIQUE_ID_BYTES), and closes.
// Everything is fixed-size, so a peer can never make us allocate or wait without bound:
//   - the receiver ignores connections whose head does not match (port scanners, a stale job, a
//     different ring), as Paddle does, and says which it ignored if rank 0 never shows up;
//   - a matching peer that closes before all id bytes arrive is an error;
//   - both sides give up at the deadline with an error naming the endpoint.
// The exchange handles raw bytes and works without NCCL or a GPU.
#pragma once

#include <array>
#include <chrono>
#include <string>
#include <vector>

#include "fleet/base/result.h"

namespace fleet::collective {

inline constexpr size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using UniqueId = std::array<char, kUniqueIdBytes>;

struct IdExchangeOptions {
  int ring_id = 0;
  // Paddle waits 900 s for its peers.
  std::chrono::milliseconds timeout = std::chrono::seconds(900);
};

// Rank 0: sends `ids` to every endpoint ("host:port", ranks 1..N-1 in order). Connection attempts
// are retried with backoff until the deadline; a peer that answers the head with anything but the
// echo is retried too (it may be another process holding the port) and reported at the deadline.
Status SendUniqueIds(const std::vector<std::string>& endpoints, const std::vector<UniqueId>& ids,
                     const IdExchangeOptions& options = {});

// Ranks 1..N-1: listens on `endpoint`'s port and returns the `count` ids rank 0 sends.
Result<std::vector<UniqueId>> ReceiveUniqueIds(const std::string& endpoint, size_t count,
                                               const IdExchangeOptions& options = {});

}  // namespace fleet::collective

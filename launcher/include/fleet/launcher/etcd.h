// EtcdClient: the few etcd v3 calls elastic fleetrun needs, over etcd's JSON gRPC gateway
// (POST /v3/kv/range, /v3/kv/put, /v3/kv/deleterange, /v3/lease/grant, /v3/lease/keepalive,
// /v3/lease/revoke; etcd 3.4+). Keys and values are bytes (base64 on the wire); revisions and lease
// ids are int64 (decimal strings on the wire). Every call is one bounded request over
// fleet::kube::PlainHttpClient (Boost.Beast): done by the client's timeout or the caller's earlier
// deadline (connecting included), its response head at most 64 KiB, its body at most 4 MiB; past
// any of these it is an error, never waited for or buffered whole. See docs/security.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fleet/base/result.h"

namespace fleet::kube {
class PlainHttpClient;
}

namespace fleet::launcher {

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;   // the store's revision when the key was created: a global order
  int64_t lease = 0;             // 0: none
};

// The answers of the gateway, parsed (what EtcdClient does with a 200 answer's body; public for
// the fuzz target, tests/launcher/fuzz/). Errors say what is wrong, never more than that.
// /v3/kv/range: the "kvs", in the order given.
Result<std::vector<EtcdKeyValue>> ParseRangeAnswer(const std::string& body);
// /v3/lease/grant: the lease's "ID" (an error when missing or 0).
Result<int64_t> ParseLeaseGrantAnswer(const std::string& body);
// /v3/lease/keepalive: whether the lease is still alive (its "result" has a positive TTL).
Result<bool> ParseKeepAliveAnswer(const std::string& body);

class EtcdClient {
 public:
  // When a call must be done at the latest; Deadline::max(): only the client's timeout applies.
  using Deadline = std::chrono::steady_clock::time_point;

  // `server`: host:port, as --elastic_server takes it (plain HTTP). Checks nothing on the network.
  static Result<std::unique_ptr<EtcdClient>> Create(const std::string& server, std::chrono::milliseconds timeout);
  ~EtcdClient();

  // Each call is done by the client's timeout, or by `deadline` when that is earlier: a caller
  // making several calls for one purpose (leaving the job) gives them all one deadline.
  // Every key starting with `prefix`, in key order.
  Result<std::vector<EtcdKeyValue>> GetPrefix(const std::string& prefix, Deadline deadline = Deadline::max());
  Result<std::optional<std::string>> Get(const std::string& key, Deadline deadline = Deadline::max());
  Status Put(const std::string& key, const std::string& value, int64_t lease = 0, Deadline deadline = Deadline::max());
  Status Delete(const std::string& key, Deadline deadline = Deadline::max());
  Status DeletePrefix(const std::string& prefix, Deadline deadline = Deadline::max());
  // A lease of `ttl_seconds`; keys put with it vanish when it is neither kept alive nor revoked.
  Result<int64_t> GrantLease(int ttl_seconds, Deadline deadline = Deadline::max());
  // Renews the lease; false when it has expired (its keys are gone already).
  Result<bool> KeepAlive(int64_t lease, Deadline deadline = Deadline::max());
  // Ends the lease and deletes its keys; an expired lease is no error.
  Status RevokeLease(int64_t lease, Deadline deadline = Deadline::max());

  const std::string& server() const { return server_; }

 private:
  EtcdClient(std::string server, std::unique_ptr<kube::PlainHttpClient> http);
  // The decoded JSON answer of one call, as text; errors name the call and the server.
  Result<std::string> Call(const std::string& path, const std::string& body, Deadline deadline);

  std::string server_;
  std::unique_ptr<kube::PlainHttpClient> http_;
};

// Bytes from etcd (or from something answering in its place), which anyone who may write to it
// chose, for a message: a JSON string of at most 100 of them, control characters and invalid
// UTF-8 escaped, "..." after it when there was more.
std::string ShowEtcdBytes(std::string_view bytes);

// The end of etcd's range for "every key starting with `prefix`": the prefix with its last byte
// incremented (bytes 0xff dropped first).
std::string PrefixRangeEnd(const std::string& prefix);

}  // namespace fleet::launcher

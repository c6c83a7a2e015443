// libFuzzer target: one input is the body of an etcd JSON gateway's 200 answer, as a hostile or
// broken etcd may send it (at most the client's 4 MiB body limit), fed to every parser the client
// has. None may crash, leak, hang or read out of bounds; what they accept must be consistent.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fleet/launcher/etcd.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fleet::launcher;
  const std::string body(reinterpret_cast<const char*>(data), size);
  if (auto kvs = ParseRangeAnswer(body); kvs.ok()) {
    for (const EtcdKeyValue& kv : *kvs) {
      // Decoded base64 is never longer than the answer that carried it.
      if (kv.key.size() > size || kv.value.size() > size) std::abort();
    }
  }
  if (auto id = ParseLeaseGrantAnswer(body); id.ok() && *id == 0) std::abort();   // 0 is "no lease"
  (void)ParseKeepAliveAnswer(body);
  return 0;
}

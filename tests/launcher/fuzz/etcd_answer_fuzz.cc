// libFuzzer target: one input is the body of an etcd JSON gateway's 200 answer, as a hostile or
// broken etcd may send it (at most the client's 4 MiB body limit), fed to every parser the client
// has, and to what messages show of etcd's bytes. None may crash, leak, hang or read out of bounds;
// what they accept must be consistent.
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
  // What a message shows of etcd's bytes: short, and nothing a terminal would act on.
  const std::string shown = ShowEtcdBytes(body);
  if (shown.size() > 6 * 100 + 5) std::abort();
  for (const char c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) std::abort();
  }
  return 0;
}

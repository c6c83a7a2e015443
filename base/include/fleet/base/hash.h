// FNV-1a, 64 bits: a fast, stable, non-cryptographic hash for checksums and digests that this
// project writes and reads back itself (never against an adversary).
#pragma once

#include <cstdint>
#include <string_view>

namespace fleet {

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;

// The hash of `bytes`; pass the previous result as `hash` to continue over data in pieces.
inline uint64_t Fnv1a64(std::string_view bytes, uint64_t hash = kFnv1a64Offset) {
  for (const char c : bytes) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return hash;
}

}  // namespace fleet

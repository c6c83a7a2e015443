// Hand-written protobuf wire format for the bulk messages (internal). PushDense, PullDense and
// PullSparse are served and called as raw gRPC methods so that a payload is not copied into and
// out of a protobuf string: a trainer's push goes out straight from its buffer, a server applies
// it straight from the received slices, and answers are built in one slice. The bytes on the wire
// are exactly the messages of fleet_ps.proto, so any protobuf client interoperates.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fleet/ps/status.h"

namespace fleet::ps::codec {

// A length-delimited field's bytes as they lie in the received slices.
struct Segments {
  std::vector<std::pair<const char*, size_t>> parts;
  size_t size = 0;
  void CopyTo(char* out) const;
};

// Reads the fields of one message from a ByteBuffer. The buffer's slices are kept (referenced)
// for as long as the reader lives, so Segments stay valid that long.
class Reader {
 public:
  explicit Reader(const grpc::ByteBuffer& buffer);
  // The next field's number and wire type; false at the end or on an error (see ok()).
  bool Next(uint32_t* field, uint32_t* wire_type);
  bool Varint(uint64_t* value);
  bool Bytes(Segments* out);
  bool Skip(uint32_t wire_type);
  bool ok() const { return ok_; }

 private:
  bool Byte(uint8_t* b);
  std::vector<grpc::Slice> slices_;
  size_t slice_ = 0;
  size_t pos_ = 0;
  bool ok_ = true;
};

void PutVarint(std::string* out, uint64_t value);
void PutVarintField(std::string* out, uint32_t field, uint64_t value);

// DenseRequest (op, table, begin, end, trainer): header fields in one small slice, then the n pushed
// values themselves (none for a pull), not copied: they must outlive the call.
grpc::ByteBuffer DenseRequest(uint32_t op, uint32_t table, uint64_t begin, uint64_t end, uint32_t trainer,
                              const float* values, size_t n);
// A DenseRequest, or a PushDenseRequest (its fields 1-4 are DenseRequest's; op and end stay 0).
struct Dense {
  uint64_t table = 0, begin = 0, trainer = 0, op = 0, end = 0;
  Segments values;
};
Status ParseDense(Reader& reader, Dense* out);

grpc::ByteBuffer PullDenseRequest(uint32_t table, uint64_t begin, uint64_t end);
struct PullDense {
  uint64_t table = 0, begin = 0, end = 0;
};
Status ParsePullDense(Reader& reader, PullDense* out);

grpc::ByteBuffer PullSparseRequest(uint32_t table, const uint64_t* keys, size_t n);
struct PullSparse {
  uint64_t table = 0;
  Segments keys;
};
Status ParsePullSparse(Reader& reader, PullSparse* out);

// A message whose field 1 holds `bytes` bytes, in one slice, to be written at *payload (the length
// varint is padded to 5 bytes, which protobuf parsers accept). The answer of a good pull
// (PullDenseResponse, PullSparseResponse, DenseAnswer).
grpc::ByteBuffer BytesField1(size_t bytes, char** payload);
// The same message's bytes before the payload (field 1's tag and padded length), written at `at`.
inline constexpr size_t kBytesField1Header = 6;
void PutBytesField1Header(char* at, size_t bytes);
// Reads an answer: a DenseAnswer's failure (code, error) as that status; otherwise copies field 1
// (the values) into out, which holds exactly `bytes` bytes. Also reads PullDenseResponse and
// PullSparseResponse, which have field 1 only.
Status ReadAnswer(const grpc::ByteBuffer& buffer, char* out, size_t bytes);
// DenseAnswer { code, error } of a failed request.
grpc::ByteBuffer FailedAnswer(const Status& status);

// PushResponse { applied }; with applied false, an empty message (also a good push's DenseAnswer).
grpc::ByteBuffer Applied(bool applied);

}  // namespace fleet::ps::codec

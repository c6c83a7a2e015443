#include "codec.h"

#include <grpc/slice.h>

#include <cstring>

namespace fleet::ps::codec {

void Segments::CopyTo(char* out) const {
  for (const auto& [p, n] : parts) {
    std::memcpy(out, p, n);
    out += n;
  }
}

Reader::Reader(const grpc::ByteBuffer& buffer) {
  if (!buffer.Dump(&slices_).ok()) ok_ = false;
}

bool Reader::Byte(uint8_t* b) {
  while (slice_ < slices_.size() && pos_ == slices_[slice_].size()) {
    ++slice_;
    pos_ = 0;
  }
  if (slice_ == slices_.size()) return false;
  *b = slices_[slice_].begin()[pos_++];
  return true;
}

bool Reader::Next(uint32_t* field, uint32_t* wire_type) {
  if (!ok_) return false;
  while (slice_ < slices_.size() && pos_ == slices_[slice_].size()) {
    ++slice_;
    pos_ = 0;
  }
  if (slice_ == slices_.size()) return false;  // the end
  uint64_t key;
  if (!Varint(&key)) return false;
  *field = static_cast<uint32_t>(key >> 3);
  *wire_type = static_cast<uint32_t>(key & 7);
  if (*field == 0) return ok_ = false;
  return true;
}

bool Reader::Varint(uint64_t* value) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    uint8_t b;
    if (!Byte(&b)) return ok_ = false;
    if (shift < 64) v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *value = v;
      return true;
    }
  }
  return ok_ = false;  // more than 10 bytes
}

bool Reader::Bytes(Segments* out) {
  uint64_t n;
  if (!Varint(&n)) return false;
  out->parts.clear();
  out->size = 0;
  while (out->size < n) {
    while (slice_ < slices_.size() && pos_ == slices_[slice_].size()) {
      ++slice_;
      pos_ = 0;
    }
    if (slice_ == slices_.size()) return ok_ = false;  // truncated
    const size_t take = std::min<uint64_t>(n - out->size, slices_[slice_].size() - pos_);
    out->parts.emplace_back(reinterpret_cast<const char*>(slices_[slice_].begin()) + pos_, take);
    out->size += take;
    pos_ += take;
  }
  return true;
}

bool Reader::Skip(uint32_t wire_type) {
  uint64_t v;
  Segments s;
  uint8_t b;
  switch (wire_type) {
    case 0: return Varint(&v);
    case 1:
      for (int i = 0; i < 8; ++i) {
        if (!Byte(&b)) return ok_ = false;
      }
      return true;
    case 2: return Bytes(&s);
    case 5:
      for (int i = 0; i < 4; ++i) {
        if (!Byte(&b)) return ok_ = false;
      }
      return true;
    default: return ok_ = false;  // groups and unknown wire types
  }
}

void PutVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void PutVarintField(std::string* out, uint32_t field, uint64_t value) {
  PutVarint(out, uint64_t{field} << 3);
  PutVarint(out, value);
}

void PutBytesField1Header(char* at, size_t bytes) {
  // The length is written before the payload is, so it takes a fixed 5 bytes: the most protobuf's
  // parsers read for a length (up to 2^31; answers stay under the message limit).
  at[0] = 0x0a;  // field 1, length-delimited
  uint64_t v = bytes;
  for (size_t i = 1; i < kBytesField1Header; ++i) {
    at[i] = static_cast<char>((v & 0x7f) | (i < kBytesField1Header - 1 ? 0x80 : 0));
    v >>= 7;
  }
}

grpc::ByteBuffer BytesField1(size_t bytes, char** payload) {
  grpc_slice s = grpc_slice_malloc_large(kBytesField1Header + bytes);  // never inlined: the payload pointer stays valid
  char* data = reinterpret_cast<char*>(GRPC_SLICE_START_PTR(s));
  PutBytesField1Header(data, bytes);
  *payload = data + kBytesField1Header;
  grpc::Slice slice(s, grpc::Slice::STEAL_REF);
  return grpc::ByteBuffer(&slice, 1);
}

namespace {

Status Malformed(const char* what) { return InvalidArgument(std::string("malformed ") + what + " message"); }

// Reads a message's varint fields into varints[field number] and its length-delimited ones into
// bytes[field number] (null entries: skipped).
template <size_t N, size_t M>
Status ParseFields(Reader& reader, uint64_t* (&varints)[N], Segments* (&bytes)[M], const char* what) {
  uint32_t field, type;
  while (reader.Next(&field, &type)) {
    if (type == 0 && field < N && varints[field]) {
      if (!reader.Varint(varints[field])) break;
    } else if (type == 2 && field < M && bytes[field]) {
      if (!reader.Bytes(bytes[field])) break;
    } else if (!reader.Skip(type)) {
      break;
    }
  }
  return reader.ok() ? Status::Ok() : Malformed(what);
}

}  // namespace

grpc::ByteBuffer DenseRequest(uint32_t op, uint32_t table, uint64_t begin, uint64_t end, uint32_t trainer,
                              const float* values, size_t n) {
  std::string header;
  PutVarintField(&header, 1, table);
  PutVarintField(&header, 2, begin);
  PutVarintField(&header, 4, trainer);
  PutVarintField(&header, 5, op);
  if (end != 0) PutVarintField(&header, 6, end);
  if (n == 0) {
    grpc::Slice slice(header);
    return grpc::ByteBuffer(&slice, 1);
  }
  PutVarint(&header, (3u << 3) | 2);
  PutVarint(&header, n * sizeof(float));
  grpc::Slice slices[2] = {grpc::Slice(header), grpc::Slice(values, n * sizeof(float), grpc::Slice::STATIC_SLICE)};
  return grpc::ByteBuffer(slices, 2);
}

Status ParseDense(Reader& reader, Dense* out) {
  uint64_t* varints[7] = {nullptr, &out->table, &out->begin, nullptr, &out->trainer, &out->op, &out->end};
  Segments* bytes[4] = {nullptr, nullptr, nullptr, &out->values};
  return ParseFields(reader, varints, bytes, "dense request");
}

grpc::ByteBuffer PullDenseRequest(uint32_t table, uint64_t begin, uint64_t end) {
  std::string m;
  PutVarintField(&m, 1, table);
  PutVarintField(&m, 2, begin);
  PutVarintField(&m, 3, end);
  grpc::Slice slice(m);
  return grpc::ByteBuffer(&slice, 1);
}

Status ParsePullDense(Reader& reader, PullDense* out) {
  uint64_t* varints[4] = {nullptr, &out->table, &out->begin, &out->end};
  Segments* bytes[1] = {nullptr};
  return ParseFields(reader, varints, bytes, "PullDenseRequest");
}

grpc::ByteBuffer PullSparseRequest(uint32_t table, const uint64_t* keys, size_t n) {
  std::string header;
  PutVarintField(&header, 1, table);
  PutVarint(&header, (2u << 3) | 2);
  PutVarint(&header, n * sizeof(uint64_t));
  grpc::Slice slices[2] = {grpc::Slice(header), grpc::Slice(keys, n * sizeof(uint64_t), grpc::Slice::STATIC_SLICE)};
  return grpc::ByteBuffer(slices, 2);
}

Status ParsePullSparse(Reader& reader, PullSparse* out) {
  uint64_t* varints[2] = {nullptr, &out->table};
  Segments* bytes[3] = {nullptr, nullptr, &out->keys};
  return ParseFields(reader, varints, bytes, "PullSparseRequest");
}

Status ReadAnswer(const grpc::ByteBuffer& buffer, char* out, size_t bytes) {
  Reader reader(buffer);
  Segments values, error;
  uint64_t code = 0;
  uint64_t* varints[3] = {nullptr, nullptr, &code};
  Segments* fields[4] = {nullptr, &values, nullptr, &error};
  if (Status s = ParseFields(reader, varints, fields, "answer"); !s.ok()) return Internal(s.message());
  if (code != 0) {
    std::string message(error.size, '\0');
    error.CopyTo(message.data());
    // gRPC's numbering (as FromGrpc); past its last code (16) it is still a failure.
    return Status(code <= 16 ? static_cast<Code>(code) : Code::kUnknown, std::move(message));
  }
  if (values.size != bytes) {
    return Internal("the answer holds " + std::to_string(values.size) + " bytes, expected " + std::to_string(bytes));
  }
  values.CopyTo(out);
  return Status::Ok();
}

grpc::ByteBuffer FailedAnswer(const Status& status) {
  std::string m;
  PutVarintField(&m, 2, static_cast<uint64_t>(status.code()));
  PutVarint(&m, (3u << 3) | 2);
  PutVarint(&m, status.message().size());
  m += status.message();
  grpc::Slice slice(m);
  return grpc::ByteBuffer(&slice, 1);
}

grpc::ByteBuffer Applied(bool applied) {
  std::string m;
  if (applied) PutVarintField(&m, 1, 1);
  grpc::Slice slice(m);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace fleet::ps::codec

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

grpc::ByteBuffer BytesField1(size_t bytes, char** payload) {
  grpc_slice s = grpc_slice_malloc_large(8 + bytes);  // never inlined: the payload pointer stays valid
  char* data = reinterpret_cast<char*>(GRPC_SLICE_START_PTR(s));
  data[0] = 0x0a;  // field 1, length-delimited
  uint64_t v = bytes;
  for (int i = 1; i < 8; ++i) {
    data[i] = static_cast<char>((v & 0x7f) | (i < 7 ? 0x80 : 0));
    v >>= 7;
  }
  *payload = data + 8;
  grpc::Slice slice(s, grpc::Slice::STEAL_REF);
  return grpc::ByteBuffer(&slice, 1);
}

namespace {

Status Malformed(const char* what) { return InvalidArgument(std::string("malformed ") + what + " message"); }

// Reads varint fields into `slots` (by field number) and one length-delimited field.
template <size_t N>
Status ParseFields(Reader& reader, uint64_t* (&slots)[N], uint32_t bytes_field, Segments* bytes, const char* what) {
  uint32_t field, type;
  while (reader.Next(&field, &type)) {
    if (field < N && slots[field] && type == 0) {
      if (!reader.Varint(slots[field])) break;
    } else if (bytes && field == bytes_field && type == 2) {
      if (!reader.Bytes(bytes)) break;
    } else if (!reader.Skip(type)) {
      break;
    }
  }
  return reader.ok() ? Status::Ok() : Malformed(what);
}

}  // namespace

grpc::ByteBuffer PushDenseRequest(uint32_t table, uint64_t begin, uint32_t trainer, const float* values, size_t n) {
  std::string header;
  PutVarintField(&header, 1, table);
  PutVarintField(&header, 2, begin);
  PutVarintField(&header, 4, trainer);
  PutVarint(&header, (3u << 3) | 2);
  PutVarint(&header, n * sizeof(float));
  grpc::Slice slices[2] = {grpc::Slice(header), grpc::Slice(values, n * sizeof(float), grpc::Slice::STATIC_SLICE)};
  return grpc::ByteBuffer(slices, 2);
}

Status ParsePushDense(Reader& reader, PushDense* out) {
  uint64_t* slots[5] = {nullptr, &out->table, &out->begin, nullptr, &out->trainer};
  return ParseFields(reader, slots, 3, &out->values, "PushDenseRequest");
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
  uint64_t* slots[4] = {nullptr, &out->table, &out->begin, &out->end};
  return ParseFields(reader, slots, 0, nullptr, "PullDenseRequest");
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
  uint64_t* slots[2] = {nullptr, &out->table};
  return ParseFields(reader, slots, 2, &out->keys, "PullSparseRequest");
}

Status ReadBytesField1(const grpc::ByteBuffer& buffer, char* out, size_t bytes) {
  Reader reader(buffer);
  Segments values;
  uint64_t* slots[1] = {nullptr};
  if (Status s = ParseFields(reader, slots, 1, &values, "answer"); !s.ok()) return Internal(s.message());
  if (values.size != bytes) {
    return Internal("the answer holds " + std::to_string(values.size) + " bytes, expected " + std::to_string(bytes));
  }
  values.CopyTo(out);
  return Status::Ok();
}

grpc::ByteBuffer Applied(bool applied) {
  std::string m;
  if (applied) PutVarintField(&m, 1, 1);
  grpc::Slice slice(m);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace fleet::ps::codec

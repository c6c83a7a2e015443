// Bad peers: garbage on the socket, undecodable messages, oversized messages and requests with bad
// fields all get an error (or a closed connection), and the server goes on serving. Plain protobuf
// clients read what the hand-written codec sends.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <thread>

#include "fleet_ps.grpc.pb.h"
#include "ps_test_util.h"
#include "wire_test_util.h"

namespace fleet::ps {
namespace {

using testing::Cluster;
using testing::InfoWorks;
using testing::RawStub;
using testing::StartCluster;

void SendRaw(const std::string& endpoint, const std::string& bytes) {
  const auto colon = endpoint.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  ::inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &addr.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  (void)n;
  ::shutdown(fd, SHUT_WR);
  char buf[256];
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  while (::recv(fd, buf, sizeof(buf), 0) > 0) {
  }
  ::close(fd);
}

class PsMalformedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = StartCluster(2, 2, "", [](ServerOptions& o) {
      o.max_message_bytes = 1 << 20;
      o.tables = {TableConfig::Dense(0, 100, OptimizerConfig::Sgd(0.1f)),
                  TableConfig::Sparse(1, 4, OptimizerConfig::Sgd(0.1f), Mode::kSync)};
    });
    ASSERT_EQ(cluster_.endpoints.size(), 2u);
    endpoint_ = cluster_.endpoints[0];
    stub_ = RawStub(endpoint_);
  }

  template <typename Req, typename Resp, typename Method>
  grpc::Status Call(Method method, const Req& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    Resp resp;
    return (stub_.get()->*method)(&ctx, req, &resp);
  }

  Cluster cluster_;
  std::string endpoint_;
  std::unique_ptr<wire::ParameterServer::Stub> stub_;
};

TEST_F(PsMalformedTest, GarbageOnTheSocketClosesThatConnectionOnly) {
  std::mt19937 rng(1);
  std::string noise(64 << 10, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  SendRaw(endpoint_, noise);
  SendRaw(endpoint_, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  SendRaw(endpoint_, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");  // a preface, then nothing sensible
  SendRaw(endpoint_, std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + "\x00\xff\xff\x01\x00\x00\x00\x00\x01" + noise);
  SendRaw(endpoint_, "");
  EXPECT_TRUE(InfoWorks(endpoint_, 2));
}

TEST_F(PsMalformedTest, AnUndecodableMessageIsAnError) {
  grpc::GenericStub generic(grpc::CreateChannel(endpoint_, grpc::InsecureChannelCredentials()));
  // DenseStream too: one undecodable message on it ends that stream with an error.
  for (const std::string method :
       {"/fleet.ps.wire.ParameterServer/PushDense", "/fleet.ps.wire.ParameterServer/CreateTable",
        "/fleet.ps.wire.ParameterServer/PullSparse", "/fleet.ps.wire.ParameterServer/DenseStream",
        "/fleet.ps.wire.ParameterServer/NoSuchMethod"}) {
    std::string junk = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x0a\xff\xff\xff\x0f";
    grpc::Slice slice(junk);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      std::lock_guard lock(m);
      status = s;
      done = true;
      cv.notify_all();
    });
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return done; });
    EXPECT_FALSE(status.ok()) << method;
  }
  EXPECT_TRUE(InfoWorks(endpoint_, 2));
}

TEST_F(PsMalformedTest, AnOversizedMessageIsRefused) {
  auto big = RawStub(endpoint_, 64 << 20);
  wire::PushDenseRequest req;
  req.set_table_id(0);
  req.set_values(std::string(2 << 20, '\0'));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  wire::PushResponse resp;
  grpc::Status s = big->PushDense(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  // A pull whose answer would pass the limit is refused before it is built.
  wire::PullDenseRequest pull;
  pull.set_table_id(0);
  pull.set_begin(0);
  pull.set_end(uint64_t{1} << 62);
  EXPECT_EQ((Call<wire::PullDenseRequest, wire::PullDenseResponse>(&wire::ParameterServer::Stub::PullDense, pull)).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  wire::PullSparseRequest sparse;
  sparse.set_table_id(1);
  sparse.set_keys(std::string(8 * 80000, '\0'));  // 640 KB of keys, but 80000 rows x 16 bytes > 1 MiB
  EXPECT_EQ((Call<wire::PullSparseRequest, wire::PullSparseResponse>(&wire::ParameterServer::Stub::PullSparse, sparse)).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  // On a DenseStream: the oversized message ends that stream.
  grpc::ClientContext stream_ctx;
  stream_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = big->DenseStream(&stream_ctx);
  wire::DenseRequest push;
  push.set_op(wire::DenseRequest::PUSH);
  push.set_values(std::string(2 << 20, '\0'));
  stream->Write(push);
  wire::DenseAnswer answer;
  EXPECT_FALSE(stream->Read(&answer));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(InfoWorks(endpoint_, 2));
}

TEST_F(PsMalformedTest, ADenseStreamAnswersEveryBadRequestWithItsCodeAndGoesOn) {
  using grpc::StatusCode;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub_->DenseStream(&ctx);
  auto request = [](int op, uint32_t table, uint64_t begin, uint64_t end, std::string values, uint32_t trainer) {
    wire::DenseRequest r;
    r.set_op(static_cast<wire::DenseRequest::Op>(op));
    r.set_table_id(table);
    r.set_begin(begin);
    r.set_end(end);
    r.set_values(std::move(values));
    r.set_trainer_id(trainer);
    return r;
  };
  const int kPush = wire::DenseRequest::PUSH, kPull = wire::DenseRequest::PULL, kBoth = wire::DenseRequest::PUSH_PULL;
  const std::string f4(4, '\0');
  struct Case {
    wire::DenseRequest request;
    StatusCode code;
    const char* what;
  };
  const Case cases[] = {
      {request(kPush, 9, 0, 0, f4, 0), StatusCode::NOT_FOUND, "no table"},
      {request(kBoth, 0, 0, 0, "abc", 0), StatusCode::INVALID_ARGUMENT, "3 bytes"},
      {request(kPush, 0, 60, 0, f4, 0), StatusCode::OUT_OF_RANGE, "server 1's part"},
      {request(kBoth, 0, ~uint64_t{0}, 0, f4, 0), StatusCode::OUT_OF_RANGE, "offset 2^64-1"},
      {request(kPush, 0, 0, 0, f4, 2), StatusCode::INVALID_ARGUMENT, "trainer 2 of 2"},
      {request(0, 0, 0, 1, "", 0), StatusCode::INVALID_ARGUMENT, "no op"},
      {request(9, 0, 0, 1, "", 0), StatusCode::INVALID_ARGUMENT, "op 9"},
      {request(kPull, 0, 10, 5, "", 0), StatusCode::INVALID_ARGUMENT, "end < begin"},
      {request(kPull, 0, 0, uint64_t{1} << 62, "", 0), StatusCode::RESOURCE_EXHAUSTED, "an answer over the limit"},
      {request(kPull, 0, 40, 60, "", 0), StatusCode::OUT_OF_RANGE, "a pull into server 1's part"},
      {request(kBoth, 1, 0, 0, f4, 0), StatusCode::INVALID_ARGUMENT, "a sparse table"},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(stream->Write(c.request)) << c.what;
    wire::DenseAnswer answer;
    ASSERT_TRUE(stream->Read(&answer)) << c.what;
    EXPECT_EQ(answer.code(), static_cast<uint32_t>(c.code)) << c.what << ": " << answer.error();
    EXPECT_FALSE(answer.error().empty()) << c.what;
    EXPECT_TRUE(answer.values().empty()) << c.what;
  }
  // The same stream then serves a good request: a push and the values after it.
  ASSERT_TRUE(stream->Write(request(kBoth, 0, 10, 0, std::string(8, '\0'), 1)));
  wire::DenseAnswer answer;
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_EQ(answer.code(), 0u) << answer.error();
  EXPECT_EQ(answer.values().size(), 8u);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(InfoWorks(endpoint_, 2));
}

TEST_F(PsMalformedTest, PlainProtobufClientsReadTheHandWrittenAnswers) {
  wire::PullDenseRequest pull;
  pull.set_table_id(0);
  pull.set_begin(3);
  pull.set_end(10);
  grpc::ClientContext ctx;
  wire::PullDenseResponse dense;
  ASSERT_TRUE(stub_->PullDense(&ctx, pull, &dense).ok());
  EXPECT_EQ(dense.values().size(), 7u * 4);
  wire::PullSparseRequest keys;
  keys.set_table_id(1);
  keys.set_keys(std::string(8 * 3, '\0'));  // key 0, three times
  grpc::ClientContext ctx2;
  wire::PullSparseResponse rows;
  ASSERT_TRUE(stub_->PullSparse(&ctx2, keys, &rows).ok());
  EXPECT_EQ(rows.values().size(), 3u * 4 * 4);
}

TEST_F(PsMalformedTest, RequestsWithBadFieldsGetTheRightCode) {
  using Stub = wire::ParameterServer::Stub;
  using grpc::StatusCode;
  auto push = [](uint32_t table, uint64_t begin, std::string values, uint32_t trainer) {
    wire::PushDenseRequest r;
    r.set_table_id(table);
    r.set_begin(begin);
    r.set_values(std::move(values));
    r.set_trainer_id(trainer);
    return r;
  };
  auto sparse = [](uint32_t table, std::string keys, std::string values, uint32_t chunks) {
    wire::PushSparseRequest r;
    r.set_table_id(table);
    r.set_keys(std::move(keys));
    r.set_values(std::move(values));
    r.set_chunk_count(chunks);
    return r;
  };
  const std::string f4(4, '\0'), k8(8, '\0');
  struct Case {
    grpc::Status status;
    StatusCode code;
    const char* what;
  };
  wire::CreateTableRequest bad_kind;
  bad_kind.mutable_config()->set_kind(static_cast<wire::TableConfig::Kind>(7));
  bad_kind.mutable_config()->set_size(4);
  wire::CreateTableRequest bad_optimizer;
  bad_optimizer.mutable_config()->set_size(4);
  bad_optimizer.mutable_config()->mutable_optimizer()->set_kind(static_cast<wire::OptimizerKind>(99));
  bad_optimizer.mutable_config()->set_mode(wire::ASYNC);
  wire::CreateTableRequest conflicting;
  conflicting.mutable_config()->set_size(101);
  conflicting.mutable_config()->mutable_optimizer()->set_kind(wire::SGD);
  conflicting.mutable_config()->mutable_optimizer()->set_learning_rate(0.1f);
  conflicting.mutable_config()->set_mode(wire::ASYNC);
  wire::PullDenseRequest backwards;
  backwards.set_table_id(0);
  backwards.set_begin(10);
  backwards.set_end(5);
  wire::BarrierRequest barrier;
  barrier.set_trainer_id(5);
  wire::StopWorkerRequest stop;
  stop.set_trainer_id(1u << 31);
  wire::SaveRequest save;
  const Case cases[] = {
      {Call<wire::PushDenseRequest, wire::PushResponse>(&Stub::PushDense, push(9, 0, f4, 0)), StatusCode::NOT_FOUND, "no table"},
      {Call<wire::PushDenseRequest, wire::PushResponse>(&Stub::PushDense, push(0, 0, "abc", 0)), StatusCode::INVALID_ARGUMENT, "3 bytes"},
      {Call<wire::PushDenseRequest, wire::PushResponse>(&Stub::PushDense, push(0, 60, f4, 0)), StatusCode::OUT_OF_RANGE, "server 1's part"},
      {Call<wire::PushDenseRequest, wire::PushResponse>(&Stub::PushDense, push(0, ~uint64_t{0}, f4, 0)), StatusCode::OUT_OF_RANGE, "offset 2^64-1"},
      {Call<wire::PushDenseRequest, wire::PushResponse>(&Stub::PushDense, push(0, 0, f4, 2)), StatusCode::INVALID_ARGUMENT, "trainer 2 of 2"},
      {Call<wire::PushDenseRequest, wire::PushResponse>(&Stub::InitDense, push(1, 0, f4, 0)), StatusCode::INVALID_ARGUMENT, "init a sparse table"},
      {Call<wire::PullDenseRequest, wire::PullDenseResponse>(&Stub::PullDense, backwards), StatusCode::INVALID_ARGUMENT, "end < begin"},
      {Call<wire::PushSparseRequest, wire::PushResponse>(&Stub::PushSparse, sparse(1, "1234567", "", 1)), StatusCode::INVALID_ARGUMENT, "7-byte key"},
      {Call<wire::PushSparseRequest, wire::PushResponse>(&Stub::PushSparse, sparse(1, k8, f4, 1)), StatusCode::INVALID_ARGUMENT, "dim mismatch"},
      {Call<wire::PushSparseRequest, wire::PushResponse>(&Stub::PushSparse, sparse(1, k8, std::string(16, '\0'), 0)), StatusCode::INVALID_ARGUMENT, "chunk_count 0"},
      {Call<wire::PushSparseRequest, wire::PushResponse>(&Stub::PushSparse, sparse(1, std::string("\x01\0\0\0\0\0\0\0", 8), std::string(16, '\0'), 1)), StatusCode::INVALID_ARGUMENT, "key of server 1"},
      {Call<wire::CreateTableRequest, wire::CreateTableResponse>(&Stub::CreateTable, bad_kind), StatusCode::INVALID_ARGUMENT, "kind 7"},
      {Call<wire::CreateTableRequest, wire::CreateTableResponse>(&Stub::CreateTable, bad_optimizer), StatusCode::INVALID_ARGUMENT, "optimizer 99"},
      {Call<wire::CreateTableRequest, wire::CreateTableResponse>(&Stub::CreateTable, conflicting), StatusCode::FAILED_PRECONDITION, "table 0 again, another size"},
      {Call<wire::BarrierRequest, wire::BarrierResponse>(&Stub::Barrier, barrier), StatusCode::INVALID_ARGUMENT, "barrier of trainer 5"},
      {Call<wire::StopWorkerRequest, wire::StopWorkerResponse>(&Stub::StopWorker, stop), StatusCode::INVALID_ARGUMENT, "stop trainer 2^31"},
      {Call<wire::SaveRequest, wire::SaveResponse>(&Stub::Save, save), StatusCode::INVALID_ARGUMENT, "save without a directory"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.error_code(), c.code) << c.what << ": " << c.status.error_message();
    EXPECT_FALSE(c.status.error_message().empty()) << c.what;
  }
  EXPECT_TRUE(InfoWorks(endpoint_, 2));
}

TEST_F(PsMalformedTest, ManyBadRequestsAtOnceLeaveTheServerServing) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      auto stub = RawStub(endpoint_);
      for (int i = 0; i < 200; ++i) {
        wire::PushSparseRequest r;
        r.set_table_id(static_cast<uint32_t>(rng() % 3));
        std::string keys(rng() % 40, '\0'), values(rng() % 80, '\0');
        for (char& c : keys) c = static_cast<char>(rng());
        for (char& c : values) c = static_cast<char>(rng());
        r.set_keys(keys);
        r.set_values(values);
        r.set_trainer_id(static_cast<uint32_t>(rng() % 3));
        r.set_chunk_count(static_cast<uint32_t>(rng() % 3));
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
        wire::PushResponse resp;
        (void)stub->PushSparse(&ctx, r, &resp);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(InfoWorks(endpoint_, 2));
}

}  // namespace
}  // namespace fleet::ps

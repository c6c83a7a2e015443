// PsServer: ServerCore behind its port: dense connections (bulk.h) and gRPC's callback API. gRPC
// handlers never block a gRPC thread: calls that wait for other trainers (sync pushes, barriers)
// keep their reactor and are finished by whichever call completes the step.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "bulk.h"
#include "codec.h"
#include "fleet/ps/server.h"
#include "wire.h"

namespace fleet::ps {
namespace {

using Clock = std::chrono::steady_clock;

// The bulk methods are raw (codec.h): their payloads go from the received slices into the tables,
// and from the tables into one answer slice, without protobuf strings in between. The others take
// protobuf messages. (Spelled out rather than layered over CallbackService: a raw stream method
// cannot override the typed one.)
using PS = wire::ParameterServer;
using Base = PS::WithRawCallbackMethod_PushDense<PS::WithRawCallbackMethod_PullDense<
    PS::WithRawCallbackMethod_PullSparse<PS::WithRawCallbackMethod_DenseStream<PS::WithCallbackMethod_Info<
        PS::WithCallbackMethod_CreateTable<PS::WithCallbackMethod_InitDense<PS::WithCallbackMethod_PushSparse<
            PS::WithCallbackMethod_Barrier<PS::WithCallbackMethod_Save<
                PS::WithCallbackMethod_StopWorker<PS::Service>>>>>>>>>>>;

enum DenseOp : uint64_t {
  kPush = wire::DenseRequest::PUSH,
  kPull = wire::DenseRequest::PULL,
  kPushPull = wire::DenseRequest::PUSH_PULL,
};

Status CheckTableId(uint64_t table) {
  if (table > UINT32_MAX) return NotFound("table " + std::to_string(table) + " does not exist");
  return Status::Ok();
}

// The answer's payload goes into one new slice of *answer.
ServerCore::Allocate AnswerInto(grpc::ByteBuffer* answer) {
  return [answer](size_t bytes) {
    char* payload = nullptr;
    *answer = codec::BytesField1(bytes, &payload);
    return payload;
  };
}

}  // namespace

void ServeDense(ServerCore& core, const codec::Dense& m, const ServerCore::Allocate& out, Done done) {
  Status s = CheckTableId(m.table);
  if (s.ok() && m.trainer > UINT32_MAX) {
    s = InvalidArgument("trainer_id " + std::to_string(m.trainer) + " is out of range");
  }
  if (s.ok() && m.op != kPush && m.op != kPull && m.op != kPushPull) {
    s = InvalidArgument("dense request op " + std::to_string(m.op) + " is not PUSH, PULL or PUSH_PULL");
  }
  if (!s.ok()) return done(s);
  const auto table = static_cast<uint32_t>(m.table);
  const auto trainer = static_cast<uint32_t>(m.trainer);
  if (m.op == kPull) return done(core.PullDense(table, m.begin, m.end, out));
  if (m.op == kPush) return core.PushDense(table, m.begin, trainer, m.values.parts, std::move(done));
  const uint64_t end = m.begin + m.values.size / sizeof(float);  // checked by the push first
  core.PushDense(table, m.begin, trainer, m.values.parts,
                 [&core, table, begin = m.begin, end, out, done = std::move(done)](Status pushed) {
                   done(pushed.ok() ? core.PullDense(table, begin, end, out) : pushed);
                 });
}

namespace {

// A trainer's DenseStream: reads a request, serves it, writes its answer, reads the next. Nothing
// blocks a gRPC thread: a sync push's answer is written by whichever thread completes the step.
class DenseStreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  DenseStreamReactor(ServerCore* core, std::atomic<size_t>* open) : core_(core), open_(open) {
    open_->fetch_add(1);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);  // the trainer closed the stream, or it broke
    reader_.emplace(request_);  // holds the request's slices until the answer is written
    request_.Clear();           // the reader has them: an idle stream keeps no chunk alive
    codec::Dense m;
    if (Status s = codec::ParseDense(*reader_, &m); !s.ok()) return Finish(ToGrpc(s));
    ServeDense(*core_, m, AnswerInto(&answer_), [this](Status s) {
      if (!s.ok()) {
        answer_ = codec::FailedAnswer(s);
      } else if (answer_.Length() == 0) {
        answer_ = codec::Applied(false);  // a push: an empty answer
      }
      StartWrite(&answer_);
    });
  }

  void OnWriteDone(bool ok) override {
    reader_.reset();
    answer_.Clear();
    if (!ok) return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the trainer went away"));
    StartRead(&request_);
  }

  void OnDone() override {
    open_->fetch_sub(1);
    delete this;
  }

 private:
  ServerCore* core_;
  std::atomic<size_t>* open_;  // the server's count of open streams
  grpc::ByteBuffer request_, answer_;
  std::optional<codec::Reader> reader_;
};

class Service final : public Base {
 public:
  explicit Service(ServerCore* core) : core_(core) {}

  std::atomic<size_t> open_dense_streams{0};

  grpc::ServerUnaryReactor* Info(grpc::CallbackServerContext* ctx, const wire::InfoRequest*,
                                 wire::InfoResponse* resp) override {
    resp->set_server_index(static_cast<uint32_t>(core_->options().server_index));
    resp->set_server_count(static_cast<uint32_t>(core_->options().server_count));
    resp->set_trainers(static_cast<uint32_t>(core_->options().trainers));
    return Finish(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* CreateTable(grpc::CallbackServerContext* ctx, const wire::CreateTableRequest* req,
                                        wire::CreateTableResponse* resp) override {
    bool created = false, loaded = false;
    Status s = core_->CreateTable(FromWire(req->config()), &created, &loaded);
    resp->set_created(created);
    resp->set_loaded(loaded);
    return Finish(ctx, s);
  }

  grpc::ServerUnaryReactor* InitDense(grpc::CallbackServerContext* ctx, const wire::PushDenseRequest* req,
                                      wire::PushResponse* resp) override {
    bool applied = false;
    Status s = core_->InitDense(req->table_id(), req->begin(), req->values(), &applied);
    resp->set_applied(applied);
    return Finish(ctx, s);
  }

  grpc::ServerUnaryReactor* PullDense(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override {
    codec::Reader reader(*req);
    codec::PullDense pull;
    if (Status s = codec::ParsePullDense(reader, &pull); !s.ok()) return Finish(ctx, s);
    codec::Dense m;
    m.op = kPull;
    m.table = pull.table;
    m.begin = pull.begin;
    m.end = pull.end;
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    ServeDense(*core_, m, AnswerInto(resp), [reactor](Status s) { reactor->Finish(ToGrpc(s)); });
    return reactor;
  }

  grpc::ServerUnaryReactor* PushDense(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override {
    // The reader keeps the request's slices referenced until the push is answered (sync pushes
    // copy what they keep, so the reader may go when the call returns).
    codec::Reader reader(*req);
    codec::Dense m;
    if (Status s = codec::ParseDense(reader, &m); !s.ok()) return Finish(ctx, s);
    m.op = kPush;
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    ServeDense(*core_, m, nullptr, [reactor, resp](Status s) {
      *resp = codec::Applied(s.ok());
      reactor->Finish(ToGrpc(s));
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* PullSparse(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override {
    codec::Reader reader(*req);
    codec::PullSparse m;
    Status s = codec::ParsePullSparse(reader, &m);
    if (s.ok()) s = CheckTableId(m.table);
    if (s.ok() && m.keys.size % sizeof(uint64_t) != 0) {
      s = InvalidArgument("sparse keys of " + std::to_string(m.keys.size) + " bytes are not whole uint64 values");
    }
    if (s.ok()) {
      std::vector<uint64_t> keys(m.keys.size / sizeof(uint64_t));
      m.keys.CopyTo(reinterpret_cast<char*>(keys.data()));
      s = core_->PullSparse(static_cast<uint32_t>(m.table), keys, AnswerInto(resp));
    }
    return Finish(ctx, s);
  }

  grpc::ServerUnaryReactor* PushSparse(grpc::CallbackServerContext* ctx, const wire::PushSparseRequest* req,
                                       wire::PushResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    core_->PushSparse(req->table_id(), req->trainer_id(), req->chunk_count(), req->keys(), req->values(),
                      [reactor, resp](Status s) {
                        resp->set_applied(s.ok());
                        reactor->Finish(ToGrpc(s));
                      });
    return reactor;
  }

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* DenseStream(grpc::CallbackServerContext*) override {
    return new DenseStreamReactor(core_, &open_dense_streams);
  }

  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx, const wire::BarrierRequest* req,
                                    wire::BarrierResponse*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    core_->Barrier(req->trainer_id(), req->generation(), [reactor](Status s) { reactor->Finish(ToGrpc(s)); });
    return reactor;
  }

  grpc::ServerUnaryReactor* Save(grpc::CallbackServerContext* ctx, const wire::SaveRequest* req,
                                 wire::SaveResponse* resp) override {
    uint32_t tables = 0;
    Status s = req->dirname().empty() ? InvalidArgument("save needs a directory") : core_->Save(req->dirname(), &tables);
    resp->set_tables(tables);
    return Finish(ctx, s);
  }

  grpc::ServerUnaryReactor* StopWorker(grpc::CallbackServerContext* ctx, const wire::StopWorkerRequest* req,
                                       wire::StopWorkerResponse* resp) override {
    bool all = false;
    Status s = core_->StopWorker(req->trainer_id(), &all);
    resp->set_stopped(all ? 1 : 0);
    return Finish(ctx, s);
  }

 private:
  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx, const Status& s) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpc(s));
    return reactor;
  }

  ServerCore* core_;
};

}  // namespace

struct PsServer::Impl {
  std::unique_ptr<Service> service;
  std::unique_ptr<bulk::Acceptor> acceptor;  // the port: dense connections, and gRPC's
  std::unique_ptr<grpc::Server> server;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::once_flag shutdown_once;
  std::thread watchdog;
};

Status PsServer::Start(const ServerOptions& options, std::unique_ptr<PsServer>* out) {
  if (options.server_count < 1 || options.server_index < 0 || options.server_index >= options.server_count) {
    return InvalidArgument("server index " + std::to_string(options.server_index) + " of " +
                           std::to_string(options.server_count) + " servers");
  }
  if (options.trainers < 1) return InvalidArgument("a parameter server needs at least one trainer");
  if (options.max_message_bytes == 0 || options.max_message_bytes > kMaxMessageBytesLimit) {
    return InvalidArgument("max_message_bytes must be between 1 and " + std::to_string(kMaxMessageBytesLimit));
  }
  TuneProcessOnce();
  std::unique_ptr<PsServer> ps(new PsServer());
  ps->core_ = std::make_unique<ServerCore>(options);
  if (!options.model_dir.empty()) {
    if (Status s = ps->core_->LoadModelDir(options.model_dir); !s.ok()) return s;
  }
  for (const TableConfig& t : options.tables) {
    if (Status s = ps->core_->Declare(t); !s.ok()) return s;
  }
  ps->impl_ = std::make_unique<Impl>();
  Impl& impl = *ps->impl_;
  impl.service = std::make_unique<Service>(ps->core_.get());
  // The server accepts connections itself (bulk.h): dense ones it serves, the others go to gRPC,
  // which has no port of its own.
  if (Status s = bulk::Acceptor::Listen(options.bind_address, &impl.acceptor); !s.ok()) {
    return Unavailable("the parameter server cannot listen on " + options.bind_address + " (" + s.message() +
                       "; address in use, or not an address of this host?)");
  }
  ps->port_ = impl.acceptor->port();
  grpc::ServerBuilder builder;
  builder.RegisterService(impl.service.get());
  // Requests and answers stay under the limit; a little room for the fields around the payload.
  const int limit = static_cast<int>(std::min<size_t>(bulk::FrameLimit(options.max_message_bytes), INT32_MAX));
  builder.SetMaxReceiveMessageSize(limit);
  builder.SetMaxSendMessageSize(limit);
  struct BuilderArgs {
    grpc::ServerBuilder& builder;
    void SetInt(const char* name, int value) { builder.AddChannelArgument(name, value); }
  } transfer{builder};
  SetTransferArgs(transfer, options.max_message_bytes);
  impl.server = builder.BuildAndStart();
  if (!impl.server) return Internal("the gRPC server did not start");
  impl.acceptor->Start(ps->core_.get(), impl.server.get(), options);
  // Fails sync steps and barriers that wait too long (a trainer died without a word).
  impl.watchdog = std::thread([core = ps->core_.get(), &impl] {
    std::unique_lock lock(impl.mutex);
    while (!impl.stopping) {
      lock.unlock();
      const Clock::time_point next = core->ExpireWaiters(Clock::now());
      lock.lock();
      impl.wake.wait_until(lock, std::min(next, Clock::now() + std::chrono::seconds(1)));
    }
  });
  *out = std::move(ps);
  return Status::Ok();
}

bool PsServer::Wait(Clock::time_point deadline) {
  if (!core_->WaitAllStopped(deadline)) return false;
  Shutdown();
  return true;
}

size_t PsServer::open_dense_streams() const {
  return impl_->service->open_dense_streams.load() + impl_->acceptor->open_connections();
}

void PsServer::Shutdown() {
  std::call_once(impl_->shutdown_once, [this] {
    if (!impl_->server) return;  // it never started
    // Answer every waiting call first: the server's shutdown waits for them.
    core_->AbortWaiters(Unavailable("the parameter server is shutting down"));
    // No new connections; dense ones close (the acceptor hands nothing to gRPC after this).
    impl_->acceptor->Shutdown();
    // Calls still running get a moment; idle client connections (a trainer that stopped but lives on)
    // would otherwise hold the shutdown for the whole deadline.
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(250));
    {
      std::lock_guard lock(impl_->mutex);
      impl_->stopping = true;
    }
    impl_->wake.notify_all();
    impl_->watchdog.join();
  });
}

PsServer::~PsServer() {
  if (impl_) Shutdown();
}

}  // namespace fleet::ps

// The Gloo backend: gloo's TCP transport and its own collectives (gloo::allreduce, broadcast,
// allgather, barrier); what is ours is the rendezvous (a TCP store served by rank 0, under gloo's
// PrefixStore and connectFullMesh), the element functions gloo does not ship (bfloat16, avg) and
// turning gloo's exceptions into Status values.
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include "backends.h"
#include "fleet/base/strings.h"
#include "fleet/collective/rendezvous_store.h"
#include "socket.h"

namespace fleet::collective {
namespace {

using net::Clock;
using std::chrono::milliseconds;

milliseconds Left(Clock::time_point deadline) {
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

// gloo's Store interface over our TCP store client. gloo expects failures as exceptions.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(RendezvousStoreClient& client, milliseconds timeout) : client_(client), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    if (auto s = client_.Set(key, data); !s) throw gloo::IoException(s.error());
  }

  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    auto value = client_.Get(key);
    if (!value) throw gloo::IoException(value.error());
    if (!*value) throw gloo::IoException("rendezvous store: key '" + key + "' is not set");
    return std::move(**value);
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    auto missing = client_.Wait(keys, timeout);
    if (!missing) throw gloo::IoException(missing.error());
    if (!missing->empty()) {
      throw gloo::IoException("timed out after " + net::FormatDuration(timeout) + " waiting for '" +
                              JoinStrings(*missing, "', '") + "' in the rendezvous store at " + client_.endpoint());
    }
  }

 private:
  RendezvousStoreClient& client_;
  milliseconds timeout_;
};

// Element functions for gloo::AllreduceOptions::setReduceFunction. gloo ships sum/max/min for
// float, double, int64_t and gloo::float16; bfloat16 is ours.
using ReduceFn = gloo::AllreduceOptions::Func;

template <typename Op>
void BFloat16Apply(void* out, const void* a, const void* b, size_t n, Op op) {
  auto* c = static_cast<BFloat16*>(out);
  const auto* x = static_cast<const BFloat16*>(a);
  const auto* y = static_cast<const BFloat16*>(b);
  for (size_t i = 0; i < n; ++i) c[i] = ToBFloat16(op(ToFloat(x[i]), ToFloat(y[i])));
}

void BFloat16Sum(void* c, const void* a, const void* b, size_t n) {
  BFloat16Apply(c, a, b, n, [](float x, float y) { return x + y; });
}
void BFloat16Max(void* c, const void* a, const void* b, size_t n) {
  BFloat16Apply(c, a, b, n, [](float x, float y) { return std::max(x, y); });
}
void BFloat16Min(void* c, const void* a, const void* b, size_t n) {
  BFloat16Apply(c, a, b, n, [](float x, float y) { return std::min(x, y); });
}

using ElementFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn GlooFunction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: return static_cast<ElementFn>(&gloo::max<T>);
    case ReduceOp::kMin: return static_cast<ElementFn>(&gloo::min<T>);
    case ReduceOp::kSum:
    case ReduceOp::kAvg: break;  // avg: the sum, then divided locally
  }
  return static_cast<ElementFn>(&gloo::sum<T>);
}

ReduceFn Function(DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kFloat32: return GlooFunction<float>(op);
    case DataType::kFloat64: return GlooFunction<double>(op);
    case DataType::kInt64: return GlooFunction<int64_t>(op);
    case DataType::kFloat16: return GlooFunction<gloo::float16>(op);
    case DataType::kBFloat16:
      return op == ReduceOp::kMax ? &BFloat16Max : op == ReduceOp::kMin ? &BFloat16Min : &BFloat16Sum;
  }
  return nullptr;
}

// The average from the sum: each element divided by the world size.
void DivideInPlace(void* data, size_t count, DataType type, int size) {
  switch (type) {
    case DataType::kFloat32:
      for (size_t i = 0; i < count; ++i) static_cast<float*>(data)[i] /= static_cast<float>(size);
      break;
    case DataType::kFloat64:
      for (size_t i = 0; i < count; ++i) static_cast<double*>(data)[i] /= size;
      break;
    case DataType::kInt64:
      for (size_t i = 0; i < count; ++i) static_cast<int64_t*>(data)[i] /= size;
      break;
    case DataType::kFloat16:
      for (size_t i = 0; i < count; ++i) {
        Float16& h = static_cast<Float16*>(data)[i];
        h = ToFloat16(ToFloat(h) / static_cast<float>(size));
      }
      break;
    case DataType::kBFloat16:
      for (size_t i = 0; i < count; ++i) {
        BFloat16& h = static_cast<BFloat16*>(data)[i];
        h = ToBFloat16(ToFloat(h) / static_cast<float>(size));
      }
      break;
  }
}

// gloo's option setters are templates on the element type; only the element size matters to
// them, the arithmetic is in the reduce function.
template <size_t kBytes>
struct Element {
  char bytes[kBytes];
};

template <typename Options, size_t kBytes>
void SetOutput(Options& options, void* data, size_t count) {
  options.template setOutput<Element<kBytes>>(static_cast<Element<kBytes>*>(data), count);
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(int rank, int size, std::shared_ptr<gloo::Context> context, milliseconds timeout)
      : Communicator(rank, size, Backend::kGloo), context_(std::move(context)), timeout_(timeout) {}

  Status AllReduce(void* data, size_t count, DataType type, ReduceOp op) override {
    return Run("all_reduce", data, count, [&] {
      if (!context_) return;  // one rank: its data is the sum, max, min and average
      gloo::AllreduceOptions options(context_);
      const size_t element = DataTypeSize(type);
      if (element == 2) SetOutput<gloo::AllreduceOptions, 2>(options, data, count);
      if (element == 4) SetOutput<gloo::AllreduceOptions, 4>(options, data, count);
      if (element == 8) SetOutput<gloo::AllreduceOptions, 8>(options, data, count);
      options.setReduceFunction(Function(type, op));
      options.setTimeout(timeout_);
      gloo::allreduce(options);
      if (op == ReduceOp::kAvg) DivideInPlace(data, count, type, size());
    });
  }

  Status Broadcast(void* data, size_t count, DataType type, int root) override {
    if (root < 0 || root >= size()) {
      return Error{"broadcast: root " + std::to_string(root) + " is not a rank of this " + std::to_string(size()) +
                   "-rank communicator"};
    }
    return Run("broadcast", data, count, [&] {
      if (!context_) return;
      gloo::BroadcastOptions options(context_);
      options.setOutput(static_cast<char*>(data), count * DataTypeSize(type));
      options.setRoot(root);
      options.setTimeout(timeout_);
      gloo::broadcast(options);
    });
  }

  Status AllGather(const void* input, void* output, size_t count, DataType type) override {
    if (count > 0 && input == nullptr) return Error{"all_gather: the input buffer is null"};
    return Run("all_gather", output, count, [&] {
      const size_t bytes = count * DataTypeSize(type);
      char* out = static_cast<char*>(output);
      char* own = out + static_cast<size_t>(rank()) * bytes;
      if (!context_) {
        if (own != input) std::memmove(own, input, bytes);
        return;
      }
      gloo::AllgatherOptions options(context_);
      // gloo copies the input to the output at this rank's offset; an input already there is in place.
      if (own != input) options.setInput(const_cast<char*>(static_cast<const char*>(input)), bytes);
      options.setOutput(out, bytes * static_cast<size_t>(size()));
      options.setTimeout(timeout_);
      gloo::allgather(options);
    });
  }

  Status Barrier() override {
    char unused = 0;
    return Run("barrier", &unused, 1, [&] {
      if (!context_) return;
      gloo::BarrierOptions options(context_);
      options.setTimeout(timeout_);
      gloo::barrier(options);
    });
  }

 private:
  // Serializes calls, refuses calls on a broken communicator, and turns gloo's exceptions into a
  // Status that breaks it.
  template <typename Body>
  Status Run(const char* what, void* data, size_t count, Body&& body) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.empty()) return Error{std::string(what) + ": the communicator is unusable after an earlier failure: " + broken_};
    if (count == 0) return OkStatus();
    if (data == nullptr) return Error{std::string(what) + ": the buffer is null"};
    try {
      body();
      return OkStatus();
    } catch (const std::exception& e) {
      broken_ = std::string("gloo ") + what + " failed on rank " + std::to_string(rank()) + ": " + e.what();
      return Error{broken_};
    }
  }

  std::shared_ptr<gloo::Context> context_;  // null for a single rank
  milliseconds timeout_;
  std::mutex mutex_;
  std::string broken_;
};

std::string Describe(const Endpoint& e) { return e.ToString(); }

}  // namespace

Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(const RankSetup& setup, const CommunicatorOptions& options) {
  const int rank = setup.rank;
  const int size = setup.size();
  if (size == 1) {
    return std::unique_ptr<Communicator>(new GlooCommunicator(0, 1, nullptr, options.operation_timeout));
  }
  const Clock::time_point deadline = Clock::now() + options.rendezvous_timeout;
  const Endpoint& master = setup.endpoints[0];
  const Endpoint& self = setup.endpoints[static_cast<size_t>(rank)];
  const std::string where = "the rendezvous store of rank 0 at " + Describe(master);

  // Rank 0 serves the store on its own endpoint for as long as the ranks need it to meet.
  std::unique_ptr<RendezvousStoreServer> server;
  if (rank == 0) {
    auto started = RendezvousStoreServer::Start(master.host, master.port, options.rendezvous_timeout);
    if (!started) return Error{"gloo rendezvous: rank 0 cannot serve the rendezvous store on " + Describe(master) + ": " + started.error()};
    server = std::move(*started);
  }
  auto client = RendezvousStoreClient::Connect(master.host, master.port, Left(deadline), options.rendezvous_timeout);
  if (!client) {
    return Error{"gloo rendezvous: rank " + std::to_string(rank) + " could not reach " + where + " within " +
                 net::FormatDuration(options.rendezvous_timeout) + ": " + client.error()};
  }

  // Join: every rank announces itself with the endpoint list it was given, so that a missing
  // rank and a rank started with a different job's env are both named.
  const std::string list = JoinEndpoints(setup.endpoints);
  std::vector<std::string> join_keys;
  for (int r = 0; r < size; ++r) join_keys.push_back("join/" + std::to_string(r));
  if (auto s = (*client)->Set(join_keys[static_cast<size_t>(rank)], std::vector<char>(list.begin(), list.end())); !s) {
    return Error{"gloo rendezvous: rank " + std::to_string(rank) + ": " + s.error()};
  }
  auto missing = (*client)->Wait(join_keys, Left(deadline));
  if (!missing) return Error{"gloo rendezvous: rank " + std::to_string(rank) + ": " + missing.error()};
  if (!missing->empty()) {
    std::vector<std::string> ranks;
    for (const std::string& key : *missing) ranks.push_back(key.substr(key.find('/') + 1));
    return Error{"gloo rendezvous timed out after " + net::FormatDuration(options.rendezvous_timeout) + ": rank(s) " +
                 JoinStrings(ranks, ", ") + " of " + std::to_string(size) + " never joined " + where};
  }
  if (rank != 0) {
    auto first = (*client)->Get(join_keys[0]);
    if (!first) return Error{"gloo rendezvous: rank " + std::to_string(rank) + ": " + first.error()};
    const std::string theirs = *first ? std::string((*first)->begin(), (*first)->end()) : "";
    if (theirs != list) {
      return Error{"gloo rendezvous: rank " + std::to_string(rank) + " was started with PADDLE_TRAINER_ENDPOINTS '" + list +
                   "' but rank 0 with '" + theirs + "'"};
    }
  }

  try {
    GlooStore store(**client, Left(deadline));
    gloo::rendezvous::PrefixStore prefixed("gloo", store);
    gloo::transport::tcp::attr attr;
    attr.hostname = self.host;  // gloo listens on this rank's own address, on a free port
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(Left(deadline));
    context->connectFullMesh(prefixed, device);
    // Nobody needs the store once every rank is connected.
    gloo::BarrierOptions barrier(context);
    barrier.setTimeout(Left(deadline));
    gloo::barrier(barrier);
    context->setTimeout(options.operation_timeout);
    return std::unique_ptr<Communicator>(new GlooCommunicator(rank, size, std::move(context), options.operation_timeout));
  } catch (const std::exception& e) {
    return Error{"gloo rendezvous failed on rank " + std::to_string(rank) + ": " + e.what()};
  }
}

}  // namespace fleet::collective

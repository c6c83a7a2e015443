// fleet_runtime.Communicator: fleet::collective for training scripts. Buffers are anything with the
// Python buffer protocol (array.array, bytearray/memoryview, numpy arrays), C-contiguous, with
// native byte order; the operations work in place and release the GIL while they run.
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include <pybind11/pybind11.h>

#include "bindings.h"
#include "fleet/collective/communicator.h"

namespace py = pybind11;

namespace fleet::python {
namespace {

using collective::Communicator;
using collective::DataType;

// The element type a buffer's struct-module format names: f float32, d float64, q/l (8 bytes)
// int64, e float16. 16-bit integer buffers hold float16/bfloat16 bits when dtype says so.
Result<DataType> FormatType(std::string format, py::ssize_t itemsize) {
  if (!format.empty() && (format[0] == '>' || format[0] == '!')) {
    return Error{"big-endian buffers (format '" + format + "') are not supported"};
  }
  if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) format.erase(0, 1);
  if (format.size() == 1) {
    const char c = format[0];
    if (c == 'f' && itemsize == 4) return DataType::kFloat32;
    if (c == 'd' && itemsize == 8) return DataType::kFloat64;
    if ((c == 'q' || c == 'l') && itemsize == 8) return DataType::kInt64;
    if (c == 'e' && itemsize == 2) return DataType::kFloat16;
  }
  return Error{"buffer format '" + format + "' (" + std::to_string(itemsize) +
               "-byte items) is not float32 ('f'), float64 ('d'), int64 ('q') or float16 ('e'); "
               "pass dtype='bfloat16' or dtype='float16' for a 2-byte buffer holding those bits"};
}

struct Buffer {
  py::buffer_info info;
  DataType type = DataType::kFloat32;
  size_t count = 0;
  void* data() const { return info.ptr; }
  size_t bytes() const { return count * collective::DataTypeSize(type); }
};

Buffer Request(const py::buffer& object, bool writable, const py::object& dtype, const char* what) {
  Buffer b;
  b.info = object.request(writable);
  py::ssize_t expected = b.info.itemsize;
  for (py::ssize_t i = b.info.ndim - 1; i >= 0; --i) {
    const auto dim = static_cast<size_t>(i);
    if (b.info.shape[dim] > 1 && b.info.strides[dim] != expected) {
      throw py::value_error(std::string(what) + " must be a C-contiguous buffer");
    }
    expected *= b.info.shape[dim];
  }
  b.count = static_cast<size_t>(b.info.size);
  auto detected = FormatType(b.info.format, b.info.itemsize);
  if (dtype.is_none()) {
    if (!detected) throw py::type_error(std::string(what) + ": " + detected.error());
    b.type = *detected;
    return b;
  }
  auto requested = collective::ParseDataType(dtype.cast<std::string>());
  if (!requested) throw py::value_error(requested.error());
  const bool half = *requested == DataType::kFloat16 || *requested == DataType::kBFloat16;
  if ((detected && *detected == *requested) || (half && b.info.itemsize == 2)) {
    b.type = *requested;
    return b;
  }
  throw py::type_error(std::string(what) + " has format '" + b.info.format + "' (" + std::to_string(b.info.itemsize) +
                       "-byte items), which cannot be reduced as " + std::string(collective::DataTypeName(*requested)));
}

// The Python object: the communicator is shared with operations in flight, so close() from
// another thread cannot pull it from under them.
class PyCommunicator {
 public:
  explicit PyCommunicator(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}

  std::shared_ptr<Communicator> Get() const {
    if (!comm_) throw RuntimeFailure("the communicator is closed");
    return comm_;
  }
  void Close() { comm_.reset(); }
  bool closed() const { return !comm_; }

 private:
  std::shared_ptr<Communicator> comm_;
};

template <typename Call>
void RunReleased(const std::shared_ptr<Communicator>& comm, Call&& call) {
  Status status = OkStatus();
  {
    py::gil_scoped_release release;
    status = call(*comm);
  }
  ThrowIfError(status);
}

// Communicator(...): the constructor's options, checked; joining blocks (without the GIL) until every
// rank has.
PyCommunicator Open(const py::object& env, const std::string& backend, double rendezvous_timeout, double timeout,
                    bool host_buffers) {
  auto choice = collective::ParseBackendChoice(backend);
  if (!choice) throw py::value_error(choice.error());
  if (!(rendezvous_timeout > 0) || !(timeout > 0)) throw py::value_error("timeouts must be positive seconds");
  collective::CommunicatorOptions options;
  options.backend = *choice;
  options.rendezvous_timeout = std::chrono::milliseconds(static_cast<long long>(rendezvous_timeout * 1000));
  options.operation_timeout = std::chrono::milliseconds(static_cast<long long>(timeout * 1000));
  options.host_buffers = host_buffers;
  const EnvMap vars = EnvFromPython(env);
  Result<std::unique_ptr<Communicator>> created = Error{""};
  {
    py::gil_scoped_release release;
    created = collective::CreateCommunicator(vars, options);
  }
  ThrowIfError(created);
  return PyCommunicator(std::shared_ptr<Communicator>(std::move(*created)));
}

py::buffer AllGather(const PyCommunicator& c, const py::buffer& input, const py::buffer& output, const py::object& dtype) {
  auto comm = c.Get();
  Buffer in = Request(input, false, dtype, "all_gather input");
  Buffer out = Request(output, true, dtype, "all_gather output");
  if (in.type != out.type) throw py::type_error("all_gather: input and output have different element types");
  if (out.count != in.count * static_cast<size_t>(comm->size())) {
    throw py::value_error("all_gather: the output has " + std::to_string(out.count) + " items, needs size * " +
                          std::to_string(in.count) + " = " + std::to_string(in.count * static_cast<size_t>(comm->size())));
  }
  RunReleased(comm, [&](Communicator& x) { return x.AllGather(in.data(), out.data(), in.count, in.type); });
  return output;
}

// The collectives: every rank calls them in the same order.
void DefineOperations(py::class_<PyCommunicator>& communicator) {
  communicator
      .def(
          "all_reduce",
          [](const PyCommunicator& c, const py::buffer& buffer, const std::string& op, const py::object& dtype) {
            auto reduce = collective::ParseReduceOp(op);
            if (!reduce) throw py::value_error(reduce.error());
            auto comm = c.Get();
            Buffer b = Request(buffer, true, dtype, "all_reduce buffer");
            RunReleased(comm, [&](Communicator& x) { return x.AllReduce(b.data(), b.count, b.type, *reduce); });
            return buffer;
          },
          py::arg("buffer"), py::arg("op") = "sum", py::arg("dtype") = py::none(),
          "In place: the element-wise sum / max / min / avg over all ranks. Returns the buffer.")
      .def(
          "broadcast",
          [](const PyCommunicator& c, const py::buffer& buffer, int root, const py::object& dtype) {
            auto comm = c.Get();
            Buffer b = Request(buffer, true, dtype, "broadcast buffer");
            RunReleased(comm, [&](Communicator& x) { return x.Broadcast(b.data(), b.count, b.type, root); });
            return buffer;
          },
          py::arg("buffer"), py::arg("root") = 0, py::arg("dtype") = py::none(),
          "In place: every rank ends with root's buffer. Returns the buffer.")
      .def("all_gather", &AllGather, py::arg("input"), py::arg("output"), py::arg("dtype") = py::none(),
           "output[r * len(input):(r + 1) * len(input)] = rank r's input, on every rank. Returns output.")
      .def(
          "barrier",
          [](const PyCommunicator& c) {
            auto comm = c.Get();
            RunReleased(comm, [](Communicator& x) { return x.Barrier(); });
          },
          "Returns once every rank has called barrier().");
}

}  // namespace

void RegisterCollective(py::module_& m) {
  py::class_<PyCommunicator> communicator(m, "Communicator", R"doc(
Collectives among the trainers of a collective job, set up from the Paddle launcher env
(PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ENDPOINTS, PADDLE_CURRENT_ENDPOINT,
PADDLE_DISTRI_BACKEND, FLAGS_selected_gpus). Blocks until every rank has joined.

  comm = fleet_runtime.Communicator()              # os.environ, backend chosen from the env
  comm.all_reduce(grad, op="avg")                  # in place
  comm.broadcast(params, root=0)
  comm.all_gather(mine, everyone)                  # len(everyone) == comm.size * len(mine)
  comm.barrier()

Every rank must call the same operations in the same order. Failures raise fleet_runtime.Error;
after one, the communicator stays unusable.)doc");
  communicator
      .def(py::init(&Open), py::kw_only(), py::arg("env") = py::none(), py::arg("backend") = "auto",
           py::arg("rendezvous_timeout") = 900.0, py::arg("timeout") = 1800.0, py::arg("host_buffers") = true,
           "env: a str->str mapping read instead of os.environ; backend: 'auto', 'gloo' or 'nccl'; "
           "rendezvous_timeout / timeout: seconds to wait for the other ranks to join / for one operation; "
           "host_buffers: buffers are host memory (nccl stages them through the GPU)")
      .def_property_readonly("rank", [](const PyCommunicator& c) { return c.Get()->rank(); })
      .def_property_readonly("size", [](const PyCommunicator& c) { return c.Get()->size(); })
      .def_property_readonly("backend",
                             [](const PyCommunicator& c) { return std::string(collective::BackendName(c.Get()->backend())); })
      .def_property_readonly("device", [](const PyCommunicator& c) { return c.Get()->device(); },
                             "the CUDA device (nccl), -1 for gloo")
      .def_property_readonly("closed", &PyCommunicator::closed);
  DefineOperations(communicator);
  communicator.def("close", &PyCommunicator::Close, "Releases the communicator (its sockets and ports).")
      .def("__enter__", [](PyCommunicator& c) -> PyCommunicator& { return c; }, py::return_value_policy::reference)
      .def("__exit__", [](PyCommunicator& c, const py::args&) { c.Close(); })
      .def("__repr__", [](const PyCommunicator& c) {
        if (c.closed()) return std::string("<fleet_runtime.Communicator closed>");
        auto comm = c.Get();
        return "<fleet_runtime.Communicator rank " + std::to_string(comm->rank()) + " of " + std::to_string(comm->size()) +
               ", " + std::string(collective::BackendName(comm->backend())) + ">";
      });

  m.def("reduce_ops", [] { return py::make_tuple("sum", "max", "min", "avg"); }, "The names all_reduce accepts as op.");
  m.def("dtypes", [] { return py::make_tuple("float32", "float64", "int64", "float16", "bfloat16"); },
        "The element types the collectives take (bfloat16: 2-byte buffers with dtype='bfloat16').");
}

}  // namespace fleet::python

// fleet_runtime.ps: the parameter-server half of Paddle's Fleet API (fleet::ps::Fleet) for
// training scripts. One process-wide fleet, like paddle.distributed.fleet:
//
//   from fleet_runtime import ps as fleet
//   strategy = fleet.DistributedStrategy(); strategy.a_sync = False          # sync
//   fleet.init(strategy=strategy)                                            # the Paddle env
//   fleet.add_dense_table(0, initial_weights, optimizer="adam", learning_rate=1e-3)
//   if fleet.is_server():
//       fleet.init_server(); fleet.run_server()
//   else:
//       fleet.init_worker()
//       w = fleet.pull_dense(0); ...; fleet.push_dense(0, grad)
//       fleet.stop_worker()
//
// Values cross as float32: inputs are buffers of float32 (array.array('f'), memoryview, numpy) or
// sequences of numbers; outputs are array.array('f') (or written into `out`). Keys are sequences
// of ints or buffers of 8-byte integers. Calls that talk to servers release the GIL. Failures raise
// fleet_runtime.Error with the status code first ("UNAVAILABLE: pserver 127.0.0.1:6001 ...").
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bindings.h"
#include "fleet/ps/fleet.h"

namespace py = pybind11;

namespace fleet::python {
namespace {

using ps::Fleet;

std::unique_ptr<Fleet>& TheFleet() {
  static std::unique_ptr<Fleet> fleet;
  return fleet;
}

Fleet& Need() {
  if (!TheFleet()) throw RuntimeFailure("call fleet_runtime.ps.init() first");
  return *TheFleet();
}

void Check(const ps::Status& s) {
  if (s.ok()) return;
  if (s.code() == ps::Code::kInvalidArgument) throw py::value_error(s.message());
  throw RuntimeFailure(s.ToString());
}

template <typename F>
void Released(F&& f) {
  ps::Status s;
  {
    py::gil_scoped_release release;
    s = f();
  }
  Check(s);
}

bool IsFormat(const py::buffer_info& info, char want, py::ssize_t size) {
  std::string f = info.format;
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.erase(0, 1);
  return info.itemsize == size && f.size() == 1 && f[0] == want;
}

bool Contiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t i = info.ndim - 1; i >= 0; --i) {
    const auto d = static_cast<size_t>(i);
    if (info.shape[d] > 1 && info.strides[d] != expected) return false;
    expected *= info.shape[d];
  }
  return true;
}

// float32 values from a buffer or a sequence of numbers.
std::vector<float> Floats(const py::handle& object, const char* what) {
  if (py::isinstance<py::buffer>(object) && !py::isinstance<py::str>(object) && !py::isinstance<py::bytes>(object)) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(object).request();
    if (!Contiguous(info)) throw py::value_error(std::string(what) + " must be a C-contiguous buffer");
    std::vector<float> out(static_cast<size_t>(info.size));
    if (IsFormat(info, 'f', 4)) {
      std::memcpy(out.data(), info.ptr, out.size() * sizeof(float));
      return out;
    }
    if (IsFormat(info, 'd', 8)) {
      const auto* d = static_cast<const double*>(info.ptr);
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(d[i]);
      return out;
    }
    throw py::type_error(std::string(what) + ": buffer format '" + info.format + "' is not float32 or float64");
  }
  if (!py::isinstance<py::sequence>(object) || py::isinstance<py::str>(object) || py::isinstance<py::bytes>(object)) {
    throw py::type_error(std::string(what) + " must be a float buffer or a sequence of numbers");
  }
  auto seq = py::reinterpret_borrow<py::sequence>(object);
  std::vector<float> out;
  out.reserve(seq.size());
  for (const py::handle item : seq) {
    try {
      out.push_back(item.cast<float>());
    } catch (const py::cast_error&) {
      throw py::type_error(std::string(what) + " must hold numbers, not " + std::string(py::str(item.get_type())));
    }
  }
  return out;
}

std::vector<uint64_t> Keys(const py::handle& object) {
  if (py::isinstance<py::buffer>(object) && !py::isinstance<py::str>(object) && !py::isinstance<py::bytes>(object)) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(object).request();
    std::string f = info.format;
    if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.erase(0, 1);
    if (!Contiguous(info) || info.itemsize != 8 || f.size() != 1 || std::string("qQlL").find(f[0]) == std::string::npos) {
      throw py::type_error("keys: a buffer of keys must hold C-contiguous 8-byte integers (format 'q' or 'Q')");
    }
    std::vector<uint64_t> out(static_cast<size_t>(info.size));
    std::memcpy(out.data(), info.ptr, out.size() * sizeof(uint64_t));
    return out;
  }
  if (!py::isinstance<py::sequence>(object) || py::isinstance<py::str>(object)) {
    throw py::type_error("keys must be a sequence of ints or an int64 buffer");
  }
  auto seq = py::reinterpret_borrow<py::sequence>(object);
  std::vector<uint64_t> out;
  out.reserve(seq.size());
  for (const py::handle item : seq) {
    if (!py::isinstance<py::int_>(item)) {
      throw py::type_error("keys must be ints, not " + std::string(py::str(item.get_type())));
    }
    const auto key = item.cast<long long>();
    if (key < 0) throw py::value_error("keys must be >= 0, got " + std::to_string(key));
    out.push_back(static_cast<uint64_t>(key));
  }
  return out;
}

// array.array('f') of n zeros, and a pointer to its storage.
py::object NewFloatArray(size_t n, float** data) {
  py::object array = py::module_::import("array").attr("array")("f", py::bytes(std::string(n * sizeof(float), '\0')));
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(array).request(true);
  *data = static_cast<float*>(info.ptr);
  return array;
}

// `out` when given (a writable float32 buffer of n items), else a new array.array('f').
py::object Output(const py::object& out, size_t n, float** data) {
  if (out.is_none()) return NewFloatArray(n, data);
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(out).request(true);
  if (!IsFormat(info, 'f', 4) || !Contiguous(info)) throw py::type_error("out must be a C-contiguous float32 buffer");
  if (static_cast<size_t>(info.size) != n) {
    throw py::value_error("out has " + std::to_string(info.size) + " items, needs " + std::to_string(n));
  }
  *data = static_cast<float*>(info.ptr);
  return out;
}

const ps::TableConfig& TableOf(uint32_t table) {
  for (const ps::TableConfig& t : Need().tables()) {
    if (t.table_id == table) return t;
  }
  throw py::value_error("table " + std::to_string(table) + " was not declared (add_dense_table / add_sparse_table)");
}

const ps::TableConfig& DenseTableOf(uint32_t table) {
  const ps::TableConfig& t = TableOf(table);
  if (t.kind != ps::TableKind::kDense) throw py::value_error("table " + std::to_string(table) + " is sparse");
  return t;
}

const ps::TableConfig& SparseTableOf(uint32_t table) {
  const ps::TableConfig& t = TableOf(table);
  if (t.kind != ps::TableKind::kSparse) throw py::value_error("table " + std::to_string(table) + " is dense");
  return t;
}

// A gradient of the whole dense table `t`, as floats.
std::vector<float> DenseGradient(const ps::TableConfig& t, const py::object& gradient) {
  std::vector<float> g = Floats(gradient, "gradient");
  if (g.size() != t.size) {
    throw py::value_error("table " + std::to_string(t.table_id) + " has " + std::to_string(t.size) +
                          " values, the gradient " + std::to_string(g.size()));
  }
  return g;
}

ps::Worker& NeedWorker() {
  ps::Worker* w = Need().worker();
  if (!w) throw RuntimeFailure("call fleet_runtime.ps.init_worker() first");
  return *w;
}

ps::OptimizerConfig Optimizer(const std::string& name, float lr, float beta1, float beta2, const py::object& epsilon,
                              float initial_accumulator) {
  ps::OptimizerKind kind;
  Check(ps::ParseOptimizer(name, &kind));
  switch (kind) {
    case ps::OptimizerKind::kSgd:
      return ps::OptimizerConfig::Sgd(lr);
    case ps::OptimizerKind::kAdam:
      return ps::OptimizerConfig::Adam(lr, beta1, beta2, epsilon.is_none() ? 1e-8f : epsilon.cast<float>());
    case ps::OptimizerKind::kAdagrad:
      return ps::OptimizerConfig::Adagrad(lr, epsilon.is_none() ? 1e-6f : epsilon.cast<float>(), initial_accumulator);
  }
  return ps::OptimizerConfig::Sgd(lr);
}

// DistributedStrategy's parameter-server fields, with Paddle's defaults (a_sync True, k_steps -1).
struct PyStrategy {
  bool a_sync = true;
  py::dict a_sync_configs;
  ps::Strategy ToStrategy() const {
    ps::Strategy s;
    s.a_sync = a_sync;
    if (a_sync_configs.contains("k_steps")) {
      const long long k = a_sync_configs["k_steps"].cast<long long>();
      if (k > 0) s.k_steps = static_cast<uint32_t>(k);
    }
    return s;
  }
};

void RegisterStrategy(py::module_& m) {
  py::class_<PyStrategy>(m, "DistributedStrategy", "fleet.DistributedStrategy(): a_sync (default True) and a_sync_configs.")
      .def(py::init<>())
      .def_readwrite("a_sync", &PyStrategy::a_sync)
      .def_property(
          "a_sync_configs", [](const PyStrategy& s) { return s.a_sync_configs; },
          [](PyStrategy& s, const py::dict& d) {
            for (auto item : d) {
              const std::string key = item.first.cast<std::string>();
              if (key != "k_steps") throw py::value_error("a_sync_configs: only k_steps is supported, got " + key);
            }
            s.a_sync_configs = d;
          })
      .def_property_readonly("mode", [](const PyStrategy& s) { return std::string(ps::ModeName(s.ToStrategy().mode())); });
}

// init, and what the role it read says.
void RegisterRole(py::module_& m) {
  m.def(
      "init",
      [](const py::object& role_maker, bool is_collective, const py::object& strategy, const py::object& env) {
        if (!role_maker.is_none()) throw py::value_error("role makers are not supported: the role comes from the Paddle env");
        if (is_collective) throw py::value_error("is_collective=True: use fleet_runtime.Communicator for collective jobs");
        ps::Strategy s;
        if (!strategy.is_none()) s = strategy.cast<const PyStrategy&>().ToStrategy();
        std::unique_ptr<Fleet> f;
        Check(Fleet::Init(EnvFromPython(env), s, &f));
        TheFleet() = std::move(f);
      },
      py::arg("role_maker") = py::none(), py::arg("is_collective") = false, py::arg("strategy") = py::none(),
      py::kw_only(), py::arg("env") = py::none(),
      "Reads this process's role from the env (or `env`, a str->str mapping) and keeps the strategy.");
  m.def("is_server", [] { return Need().is_server(); });
  m.def("is_worker", [] { return Need().is_worker(); });
  m.def("is_first_worker", [] { return Need().is_worker() && Need().worker_index() == 0; });
  m.def("worker_index", [] { return Need().worker_index(); });
  m.def("worker_num", [] { return Need().worker_num(); });
  m.def("server_index", [] { return Need().server_index(); });
  m.def("server_num", [] { return Need().server_num(); });
  m.def("server_endpoints", [] { return Need().server_endpoints(); });
  m.def("mode", [] { return std::string(ps::ModeName(Need().mode())); }, "'sync', 'async' or 'geo'.");
}

void RegisterTableDeclarations(py::module_& m) {
  m.def(
      "add_dense_table",
      [](uint32_t table, const py::object& initial, const std::string& optimizer, float learning_rate, float beta1,
         float beta2, const py::object& epsilon, float initial_accumulator) {
        std::vector<float> values;
        if (py::isinstance<py::int_>(initial)) {
          const long long n = initial.cast<long long>();
          if (n <= 0) throw py::value_error("a dense table needs a size > 0");
          values.assign(static_cast<size_t>(n), 0.0f);
        } else {
          values = Floats(initial, "initial");
        }
        Check(Need().AddDenseTable(table, std::move(values),
                                   Optimizer(optimizer, learning_rate, beta1, beta2, epsilon, initial_accumulator)));
      },
      py::arg("table_id"), py::arg("initial"), py::arg("optimizer") = "sgd", py::arg("learning_rate") = 0.01f,
      py::arg("beta1") = 0.9f, py::arg("beta2") = 0.999f, py::arg("epsilon") = py::none(),
      py::arg("initial_accumulator") = 0.0f,
      "Declares a dense table: `initial` is its initial values (trainer 0 writes them in init_worker) or its "
      "size (zeros). optimizer: 'sgd', 'adam' or 'adagrad' (geo mode: sgd only).");
  m.def(
      "add_sparse_table",
      [](uint32_t table, uint32_t dim, const std::string& optimizer, float learning_rate, float init_range,
         uint64_t seed, float beta1, float beta2, const py::object& epsilon, float initial_accumulator, uint64_t max_rows) {
        Check(Need().AddSparseTable(table, dim, Optimizer(optimizer, learning_rate, beta1, beta2, epsilon, initial_accumulator),
                                    init_range, seed, max_rows));
      },
      py::arg("table_id"), py::arg("dim"), py::arg("optimizer") = "sgd", py::arg("learning_rate") = 0.01f,
      py::arg("init_range") = 0.0f, py::arg("seed") = 0, py::arg("beta1") = 0.9f, py::arg("beta2") = 0.999f,
      py::arg("epsilon") = py::none(), py::arg("initial_accumulator") = 0.0f, py::arg("max_rows") = 0,
      "Declares a sparse (embedding) table of rows of `dim` floats, created on first pull, uniform in "
      "[-init_range, init_range] from (seed, table_id, key). max_rows: rows one server may hold (0 = the "
      "server's default); a pull or push that would create more fails with RESOURCE_EXHAUSTED.");
}

void RegisterServer(py::module_& m) {
  m.def(
      "init_server",
      [](const py::object& model_dir) {
        const std::string dir = model_dir.is_none() ? std::string() : py::str(model_dir).cast<std::string>();
        Fleet& f = Need();
        Released([&] { return f.InitServer(dir); });
      },
      py::arg("model_dir") = py::none(), "Starts serving on POD_IP:PADDLE_PORT; loads model_dir when given.");
  m.def(
      "run_server",
      [] {
        Fleet& f = Need();
        bool signalled = false;
        ps::Status s;
        {
          py::gil_scoped_release release;
          s = f.RunServer([&] {
            py::gil_scoped_acquire acquire;
            if (PyErr_CheckSignals() != 0) signalled = true;
            return signalled;
          });
        }
        if (signalled) throw py::error_already_set();  // e.g. KeyboardInterrupt
        Check(s);
      },
      "Serves until every trainer called stop_worker().");
}

// The worker's calls that are not about one table's values.
void RegisterWorker(py::module_& m) {
  m.def(
      "init_worker",
      [] {
        Fleet& f = Need();
        Released([&] { return f.InitWorker(); });
      },
      "Waits for the servers, creates the tables, writes trainer 0's initial values, then waits for all trainers.");
  m.def(
      "stop_worker",
      [] {
        Fleet& f = Need();
        Released([&] { return f.StopWorker(); });
      },
      "Flushes geo deltas and tells the servers this trainer is done (they exit when all are).");
  m.def(
      "barrier",
      [] {
        Fleet& f = Need();
        Released([&] { return f.Barrier(); });
      },
      "Returns once every trainer has called barrier() as many times.");
  m.attr("barrier_worker") = m.attr("barrier");
  m.def(
      "flush",
      [] {
        ps::Worker& w = NeedWorker();
        Released([&] { return w.Flush(); });
      },
      "geo: sends the pending deltas now; later pulls return the servers' merged values. No-op otherwise.");
  m.def(
      "save_persistables",
      [](const py::object& dirname) {
        const std::string dir = py::str(dirname).cast<std::string>();
        ps::Worker& w = NeedWorker();
        Released([&] { return w.Save(dir); });
      },
      py::arg("dirname"),
      "Every server writes its shards of every table into dirname (on the servers' filesystem); "
      "init_server(model_dir=dirname) loads them.");
}

void RegisterDense(py::module_& m) {
  m.def(
      "pull_dense",
      [](uint32_t table, const py::object& out) {
        const ps::TableConfig& t = DenseTableOf(table);
        ps::Worker& w = NeedWorker();
        float* data = nullptr;
        py::object result = Output(out, t.size, &data);
        Released([&] { return w.PullDense(table, data, t.size); });
        return result;
      },
      py::arg("table_id"), py::arg("out") = py::none(), "The table's values (array.array('f'), or into `out`).");
  m.def(
      "push_dense",
      [](uint32_t table, const py::object& gradient) {
        const ps::TableConfig& t = DenseTableOf(table);
        std::vector<float> g = DenseGradient(t, gradient);
        ps::Worker& w = NeedWorker();
        Released([&] { return w.PushDense(table, g.data(), g.size()); });
      },
      py::arg("table_id"), py::arg("gradient"),
      "sync: waits until every trainer pushed this step and it was applied; async: applied on arrival; "
      "geo: a local SGD step, deltas sent every k_steps.");
  m.def(
      "push_pull_dense",
      [](uint32_t table, const py::object& gradient, const py::object& out) {
        const ps::TableConfig& t = DenseTableOf(table);
        std::vector<float> g = DenseGradient(t, gradient);
        ps::Worker& w = NeedWorker();
        float* data = nullptr;
        py::object result = Output(out, t.size, &data);
        Released([&] { return w.PushPullDense(table, g.data(), data, t.size); });
        return result;
      },
      py::arg("table_id"), py::arg("gradient"), py::arg("out") = py::none(),
      "push_dense then pull_dense in one round trip per server: the values after this push (sync: after "
      "every trainer's push of this step).");
}

void RegisterSparse(py::module_& m) {
  m.def(
      "pull_sparse",
      [](uint32_t table, const py::object& keys, const py::object& out) {
        const ps::TableConfig& t = SparseTableOf(table);
        std::vector<uint64_t> k = Keys(keys);
        ps::Worker& w = NeedWorker();
        float* data = nullptr;
        py::object result = Output(out, k.size() * t.dim, &data);
        Released([&] { return w.PullSparse(table, k.data(), k.size(), data); });
        return result;
      },
      py::arg("table_id"), py::arg("keys"), py::arg("out") = py::none(),
      "Rows of the keys, len(keys) * dim floats, row after row (missing rows are created).");
  m.def(
      "push_sparse",
      [](uint32_t table, const py::object& keys, const py::object& gradient) {
        const ps::TableConfig& t = SparseTableOf(table);
        std::vector<uint64_t> k = Keys(keys);
        std::vector<float> g = Floats(gradient, "gradient");
        if (g.size() != k.size() * t.dim) {
          throw py::value_error("push_sparse: " + std::to_string(k.size()) + " keys of dim " + std::to_string(t.dim) +
                                " need " + std::to_string(k.size() * t.dim) + " values, got " + std::to_string(g.size()));
        }
        ps::Worker& w = NeedWorker();
        Released([&] { return w.PushSparse(table, k.data(), k.size(), g.data()); });
      },
      py::arg("table_id"), py::arg("keys"), py::arg("gradient"), "Gradients of the rows (duplicate keys are summed).");
}

}  // namespace

void RegisterPs(py::module_& parent) {
  py::module_ m = parent.def_submodule("ps", R"doc(
The parameter-server half of Paddle's Fleet API, from the Paddle launcher env (TRAINING_ROLE,
PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ID, POD_IP, PADDLE_PORT).
Tables are sharded over the servers; SGD / Adam / Adagrad run on the servers; the strategy picks
sync (a_sync=False), async (a_sync=True) or geo (a_sync=True, a_sync_configs={"k_steps": k}).
See docs/runtime.md, "Parameter server".)doc");
  RegisterStrategy(m);
  RegisterRole(m);
  RegisterTableDeclarations(m);
  RegisterServer(m);
  RegisterWorker(m);
  RegisterDense(m);
  RegisterSparse(m);
}

}  // namespace fleet::python

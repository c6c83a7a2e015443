"""The fleet_runtime Python module's collectives (runtime/python/collective.cc), from Python.

Run by ctest with PYTHONPATH=<build>/runtime/python and the interpreter the module was built for:
    python3 -m unittest -v test_fleet_runtime
Standard library only (no numpy): buffers are array.array, bytearray and memoryview.
"""
import array
import socket
import threading
import time
import unittest

import fleet_runtime as fr


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def collective_env(endpoints, rank, backend="gloo"):
    return {"PADDLE_TRAINER_ID": str(rank), "PADDLE_TRAINERS_NUM": str(len(endpoints)),
            "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints), "PADDLE_CURRENT_ENDPOINT": endpoints[rank],
            "PADDLE_DISTRI_BACKEND": backend}


def run_ranks(n, body):
    """body(comm) on n ranks, one Python thread each (the module releases the GIL while it waits)."""
    endpoints = [f"127.0.0.1:{p}" for p in free_ports(n)]
    results, errors = [None] * n, [None] * n

    def one(rank):
        try:
            with fr.Communicator(env=collective_env(endpoints, rank), rendezvous_timeout=20, timeout=20) as comm:
                results[rank] = body(comm)
        except Exception as e:  # noqa: BLE001 - reported below
            errors[rank] = e

    threads = [threading.Thread(target=one, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results, errors


def bf16(x):
    """float -> bfloat16 bits (truncation is exact for the small values used here)."""
    return array.array("f", [x]).tobytes()[2:4]


class SingleRank(unittest.TestCase):
    def setUp(self):
        self.comm = fr.Communicator(env={"PADDLE_DISTRI_BACKEND": "gloo"})

    def tearDown(self):
        self.comm.close()

    def test_identity(self):
        self.assertEqual((self.comm.rank, self.comm.size, self.comm.backend, self.comm.device), (0, 1, "gloo", -1))
        self.assertEqual(repr(self.comm), "<fleet_runtime.Communicator rank 0 of 1, gloo>")
        self.assertEqual(fr.reduce_ops(), ("sum", "max", "min", "avg"))
        self.assertIn("bfloat16", fr.dtypes())

    def test_buffers_of_every_type(self):
        for typecode in "fdq":
            buf = array.array(typecode, [1, 2, 3])
            self.assertIs(self.comm.all_reduce(buf, op="avg"), buf)
            self.assertEqual(list(buf), [1, 2, 3])
        raw = bytearray(array.array("H", [0x3c00, 0x4000]).tobytes())  # float16 1.0, 2.0
        self.comm.all_reduce(memoryview(raw).cast("H"), op="max", dtype="float16")
        self.comm.all_reduce(array.array("H", [0x3f80]), dtype="bfloat16")
        self.comm.broadcast(array.array("d", [1.5]), root=0)
        out = array.array("q", [0, 0])
        self.comm.all_gather(array.array("q", [7, 8]), out)
        self.assertEqual(list(out), [7, 8])
        self.comm.barrier()

    def test_bad_arguments_raise_value_and_type_errors(self):
        with self.assertRaisesRegex(ValueError, "unknown reduce op 'prod'"):
            self.comm.all_reduce(array.array("f", [1]), op="prod")
        with self.assertRaisesRegex(ValueError, "unknown data type 'int8'"):
            self.comm.all_reduce(array.array("f", [1]), dtype="int8")
        with self.assertRaisesRegex(TypeError, "buffer format 'i'"):
            self.comm.all_reduce(array.array("i", [1]))
        with self.assertRaisesRegex(TypeError, "cannot be reduced as int64"):
            self.comm.all_reduce(array.array("d", [1]), dtype="int64")
        with self.assertRaises(BufferError):  # read-only
            self.comm.all_reduce(memoryview(array.array("f", [1, 2])).toreadonly())
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            self.comm.all_reduce(memoryview(array.array("f", [1, 2, 3, 4]))[::2])
        with self.assertRaisesRegex(ValueError, "needs size"):
            self.comm.all_gather(array.array("f", [1, 2]), array.array("f", [0]))
        with self.assertRaisesRegex(TypeError, "different element types"):
            self.comm.all_gather(array.array("f", [1]), array.array("d", [0]))
        with self.assertRaisesRegex(fr.Error, "root 3 is not a rank"):
            self.comm.broadcast(array.array("f", [1]), root=3)
        with self.assertRaisesRegex(ValueError, "unknown backend 'mpi'"):
            fr.Communicator(env={}, backend="mpi")

    def test_closed_communicator_raises(self):
        self.comm.close()
        self.assertTrue(self.comm.closed)
        self.assertEqual(repr(self.comm), "<fleet_runtime.Communicator closed>")
        with self.assertRaisesRegex(fr.Error, "closed"):
            self.comm.barrier()


class Errors(unittest.TestCase):
    def test_error_is_a_runtime_error(self):
        self.assertTrue(issubclass(fr.Error, RuntimeError))

    def test_bad_env(self):
        env = collective_env(["127.0.0.1:6170", "127.0.0.1:6171"], 1)
        del env["PADDLE_TRAINER_ID"]
        with self.assertRaisesRegex(fr.Error, "invalid Paddle collective env: .*PADDLE_TRAINER_ID is needed"):
            fr.Communicator(env=env)

    def test_rendezvous_timeout(self):
        endpoints = [f"127.0.0.1:{p}" for p in free_ports(2)]
        start = time.monotonic()
        with self.assertRaisesRegex(fr.Error, r"rank\(s\) 1 of 2 never joined"):
            fr.Communicator(env=collective_env(endpoints, 0), rendezvous_timeout=0.5)
        self.assertLess(time.monotonic() - start, 4)


class FourRanks(unittest.TestCase):
    def test_every_operation(self):
        def body(comm):
            r, n = comm.rank, comm.size
            out = {}
            for op in fr.reduce_ops():
                buf = array.array("d", [r + 1.0, -(r + 1.0)])
                comm.all_reduce(buf, op=op)
                out[op] = list(buf)
            ints = array.array("q", [r * 3])
            comm.all_reduce(ints, op="avg")
            out["int_avg"] = ints[0]
            half = bytearray(bf16(float(r + 1)))
            comm.all_reduce(memoryview(half).cast("H"), op="sum", dtype="bfloat16")
            out["bf16"] = array.array("f", bytes(2) + bytes(half))[0]
            b = array.array("f", [float(r)] * 3)
            comm.broadcast(b, root=2)
            out["broadcast"] = list(b)
            gathered = array.array("q", [0] * n)
            comm.all_gather(array.array("q", [r * r]), gathered)
            out["all_gather"] = list(gathered)
            comm.barrier()
            return out

        results, errors = run_ranks(4, body)
        self.assertEqual(errors, [None] * 4)
        for out in results:
            self.assertEqual(out["sum"], [10.0, -10.0])
            self.assertEqual(out["max"], [4.0, -1.0])
            self.assertEqual(out["min"], [1.0, -4.0])
            self.assertEqual(out["avg"], [2.5, -2.5])
            self.assertEqual(out["int_avg"], 18 // 4)
            self.assertEqual(out["bf16"], 10.0)
            self.assertEqual(out["broadcast"], [2.0] * 3)
            self.assertEqual(out["all_gather"], [0, 1, 4, 9])


if __name__ == "__main__":
    unittest.main()

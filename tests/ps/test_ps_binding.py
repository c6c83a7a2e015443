"""fleet_runtime.ps from Python: the Fleet-shaped API, argument checking, errors as exceptions.

Run by ctest (PsPythonBinding) with PYTHONPATH=<build>/runtime/python and the interpreter the
module was built for. Each case runs in a fresh interpreter (the fleet is one per process, as
Paddle's), started with the env it needs: without PADDLE_PSERVERS_IP_PORT_LIST a trainer is alone
and init_worker starts a server inside the process.
"""
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import unittest

PADDLE_VARS = ("PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_TRAINERS_NUM", "TRAINING_ROLE", "PADDLE_TRAINER_ID",
               "POD_IP", "PADDLE_PORT", "PADDLE_TRAINER_ENDPOINTS")


def run(code, env=None, timeout=40):
    """Runs `code` in a fresh interpreter; returns (exit status, stdout + stderr)."""
    full = {k: v for k, v in os.environ.items() if k not in PADDLE_VARS}
    full.update(env or {})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout + p.stderr


class PsBindingTest(unittest.TestCase):
    def check(self, code, env=None):
        status, out = run(code, env)
        self.assertEqual(status, 0, out)
        return out

    def test_strategy_follows_paddles_defaults(self):
        self.check("""
            from fleet_runtime import ps as fleet
            s = fleet.DistributedStrategy()
            assert s.a_sync is True and s.mode == "async", s.mode       # Paddle's default
            s.a_sync = False
            assert s.mode == "sync"
            s.a_sync = True
            s.a_sync_configs = {"k_steps": 100}
            assert s.mode == "geo" and s.a_sync_configs == {"k_steps": 100}
            s.a_sync_configs = {"k_steps": -1}
            assert s.mode == "async"
            try:
                s.a_sync_configs = {"launch_barrier": True}
                raise SystemExit("unknown a_sync_configs key accepted")
            except ValueError as e:
                assert "only k_steps" in str(e)
        """)

    def test_calls_before_init_raise_fleet_runtime_error(self):
        self.check("""
            import fleet_runtime
            from fleet_runtime import ps as fleet
            for call in (fleet.is_server, fleet.worker_index, fleet.init_worker, lambda: fleet.pull_dense(0)):
                try:
                    call()
                    raise SystemExit("no error")
                except fleet_runtime.Error as e:
                    assert "init() first" in str(e), e
            try:
                fleet.init(is_collective=True)
                raise SystemExit("collective accepted")
            except ValueError as e:
                assert "Communicator" in str(e)
        """)

    def test_a_lone_trainer_trains_against_its_own_server(self):
        self.check("""
            import array, os, tempfile
            import fleet_runtime
            from fleet_runtime import ps as fleet
            fleet.init()
            assert fleet.is_worker() and not fleet.is_server() and fleet.is_first_worker()
            assert (fleet.worker_index(), fleet.worker_num(), fleet.mode()) == (0, 1, "async")
            fleet.add_dense_table(0, [1.0, 2.0, 3.0], optimizer="sgd", learning_rate=0.5)
            fleet.add_dense_table(2, 4, optimizer="adam", learning_rate=0.1)      # a size: zeros
            fleet.add_sparse_table(1, 2, optimizer="adagrad", learning_rate=1.0, init_range=0.0)
            fleet.add_sparse_table(3, 1, max_rows=2)
            try:
                fleet.pull_dense(0)
                raise SystemExit("pull before init_worker")
            except fleet_runtime.Error as e:
                assert "init_worker" in str(e)
            fleet.init_worker()
            w = fleet.pull_dense(0)
            assert isinstance(w, array.array) and w.typecode == "f" and list(w) == [1.0, 2.0, 3.0], w
            fleet.push_dense(0, array.array("d", [2.0, 2.0, 2.0]))                # float64 buffers convert
            out = array.array("f", [0.0] * 3)
            assert fleet.pull_dense(0, out=out) is out and list(out) == [0.0, 1.0, 2.0], out
            fleet.push_dense(2, [1, -1, 0, 1])
            assert [round(v, 5) for v in fleet.pull_dense(2)] == [-0.1, 0.1, 0.0, -0.1]   # Adam: lr * sign
            after = fleet.push_pull_dense(0, [1.0, 1.0, 1.0])                     # one round trip
            assert list(after) == [-0.5, 0.5, 1.5], after
            assert list(fleet.pull_sparse(3, [1, 2, 1])) == [0.0] * 3
            try:
                fleet.pull_sparse(3, [1, 3])
                raise SystemExit("a third row past max_rows=2")
            except fleet_runtime.Error as e:
                assert str(e).startswith("RESOURCE_EXHAUSTED"), str(e)
            assert list(fleet.pull_sparse(3, [2])) == [0.0]                       # held rows still serve
            rows = fleet.pull_sparse(1, [7, 8, 7])
            assert list(rows) == [0.0] * 6
            fleet.push_sparse(1, array.array("q", [7, 7]), [1.0, 0.0, 1.0, 0.0])  # duplicates summed: g = 2
            assert [round(v, 5) for v in fleet.pull_sparse(1, [7])] == [-1.0, 0.0]
            for bad, what in ((lambda: fleet.push_dense(0, [1.0]), "has 3 values"),
                              (lambda: fleet.push_sparse(1, [1], [1.0]), "need 2 values"),
                              (lambda: fleet.pull_sparse(1, [-1]), "keys must be >= 0"),
                              (lambda: fleet.pull_dense(1), "is sparse"),
                              (lambda: fleet.pull_dense(9), "was not declared"),
                              (lambda: fleet.pull_dense(0, out=array.array("f", [0.0])), "needs 3")):
                try:
                    bad()
                    raise SystemExit("accepted: " + what)
                except ValueError as e:
                    assert what in str(e), (what, str(e))
            for bad in (lambda: fleet.push_dense(0, "abc"), lambda: fleet.push_dense(0, [1.0, None, 2.0]),
                        lambda: fleet.pull_sparse(1, [1.5]), lambda: fleet.pull_sparse(1, array.array("f", [1.0]))):
                try:
                    bad()
                    raise SystemExit("accepted")
                except TypeError:
                    pass
            with tempfile.TemporaryDirectory() as d:
                fleet.save_persistables(d)
                assert sorted(os.listdir(d)) == ["table_0.shard_0_of_1", "table_1.shard_0_of_1",
                                                 "table_2.shard_0_of_1", "table_3.shard_0_of_1"], os.listdir(d)
            try:   # saves stay under FLEET_PS_SAVE_ROOT
                fleet.save_persistables("../outside")
                raise SystemExit("saved outside the save root")
            except fleet_runtime.Error as e:
                assert "PERMISSION_DENIED" in str(e) and "outside this server's save root" in str(e), str(e)
            fleet.barrier()
            fleet.flush()
            fleet.stop_worker()
            fleet.stop_worker()   # again: nothing to do
        """, env={"FLEET_PS_SAVE_ROOT": tempfile.gettempdir()})

    def test_declarations_are_checked(self):
        self.check("""
            from fleet_runtime import ps as fleet
            s = fleet.DistributedStrategy()
            s.a_sync_configs = {"k_steps": 4}
            fleet.init(strategy=s)
            assert fleet.mode() == "geo"
            for bad, what in ((lambda: fleet.add_dense_table(0, [1.0], optimizer="adam"), "only the SGD optimizer"),
                              (lambda: fleet.add_dense_table(0, [1.0], optimizer="rmsprop"), "sgd, adam or adagrad"),
                              (lambda: fleet.add_dense_table(0, 0), "size > 0"),
                              (lambda: fleet.add_sparse_table(1, 0), "dim"),
                              (lambda: fleet.add_dense_table(0, [1.0], learning_rate=-1), "learning_rate")):
                try:
                    bad()
                    raise SystemExit("accepted: " + what)
                except ValueError as e:
                    assert what in str(e), (what, str(e))
            fleet.add_dense_table(0, [1.0])
            try:
                fleet.add_sparse_table(0, 4)
                raise SystemExit("a table id declared twice")
            except ValueError as e:
                assert "declared twice" in str(e)
        """)

    def test_roles_come_from_the_paddle_env(self):
        env = {"PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:6170,127.0.0.1:6171", "PADDLE_TRAINERS_NUM": "4",
               "TRAINING_ROLE": "PSERVER", "POD_IP": "127.0.0.1", "PADDLE_PORT": "6171"}
        self.check("""
            from fleet_runtime import ps as fleet
            fleet.init()
            assert fleet.is_server() and not fleet.is_worker()
            assert (fleet.server_index(), fleet.server_num(), fleet.worker_num()) == (1, 2, 4)
            assert fleet.server_endpoints() == ["127.0.0.1:6170", "127.0.0.1:6171"]
            try:
                fleet.init_worker()
                raise SystemExit("a server became a worker")
            except Exception as e:
                assert "is a server" in str(e), e
        """, env)
        env.update(TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID="3", PADDLE_PORT="6200")
        self.check("""
            from fleet_runtime import ps as fleet
            fleet.init()
            assert fleet.is_worker() and (fleet.worker_index(), fleet.worker_num()) == (3, 4)
        """, env)
        env.update(PADDLE_TRAINER_ID="4")
        status, out = run("""
            from fleet_runtime import ps as fleet
            fleet.init()
        """, env)
        self.assertNotEqual(status, 0)
        self.assertIn("PADDLE_TRAINER_ID 4 is not below PADDLE_TRAINERS_NUM 4", out)
        del env["TRAINING_ROLE"]
        status, out = run("""
            from fleet_runtime import ps as fleet
            fleet.init(env={"PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:1", "PADDLE_TRAINERS_NUM": "1"})
        """, env)
        self.assertIn("Can not find TRAINING_ROLE, please check your environment.", out)

    def test_an_unreachable_server_is_an_error_after_the_connect_timeout(self):
        env = {"PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:1", "PADDLE_TRAINERS_NUM": "1", "TRAINING_ROLE": "TRAINER",
               "PADDLE_TRAINER_ID": "0", "POD_IP": "127.0.0.1", "PADDLE_PORT": "2",
               "FLEET_PS_CONNECT_TIMEOUT": "1", "FLEET_PS_RETRY_INTERVAL": "0.3"}
        out = self.check("""
            import fleet_runtime
            from fleet_runtime import ps as fleet
            fleet.init()
            try:
                fleet.init_worker()
                raise SystemExit("connected to nothing")
            except fleet_runtime.Error as e:
                assert str(e).startswith("UNAVAILABLE: parameter servers not reachable"), e
        """, env)
        self.assertIn("server not ready, wait 0.3 sec to retry...", out)
        self.assertIn("not ready endpoints:['127.0.0.1:1']", out)
        env["FLEET_PS_CONNECT_TIMEOUT"] = "soon"
        status, out = run("""
            from fleet_runtime import ps as fleet
            fleet.init()
            fleet.init_worker()
        """, env)
        self.assertIn("FLEET_PS_CONNECT_TIMEOUT must be a positive number of seconds", out)

    def test_run_server_stops_on_keyboard_interrupt(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        env = {"PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:" + port, "PADDLE_TRAINERS_NUM": "1",
               "TRAINING_ROLE": "PSERVER", "POD_IP": "127.0.0.1", "PADDLE_PORT": port}
        out = self.check("""
            import os, signal, threading
            from fleet_runtime import ps as fleet
            fleet.init()
            fleet.init_server()
            threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            try:
                fleet.run_server()
                raise SystemExit("run_server returned")
            except KeyboardInterrupt:
                print("interrupted")
        """, env)
        self.assertIn("interrupted", out)


if __name__ == "__main__":
    unittest.main()

"""One pipeline per runtime dir, against a real pipeline (`seqpipe up`, tiny model): a second
`seqpipe up` on the same runtime dir, and a hub started by hand there, refuse to start, naming
the dir and the running pipeline's pid, and the first pipeline keeps serving throughout. An HTTP
port in use is a start-up error naming its key.

Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py), PYTHONPATH with clients/python.
"""
import os
import re
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import SEQPIPE, PipelineTestCase, free_port  # noqa: E402

GATEWAY = os.path.join(os.path.dirname(os.path.dirname(SEQPIPE)), "services", "gateway",
                       "seqpipe-gateway")


class RuntimeDirTest(PipelineTestCase):
    PREFIX = "seqpipe-runtime-dir-"

    @classmethod
    def settings(cls):
        return ["gateway.metrics_port=0", "batcher.metrics_port=0"]

    def same_settings(self):
        p = self.pipeline
        return [a for s in [f"model.dir={p.model}", f"runtime_dir={p.run_dir}",
                            "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock",
                            "gateway.http_endpoint=127.0.0.1:0", *self.settings()]
                for a in ("--set", s)]

    def test_a_second_up_on_the_same_runtime_dir_refuses_and_the_first_keeps_serving(self):
        second = subprocess.run([SEQPIPE, "up", *self.same_settings()], capture_output=True,
                                text=True, timeout=60, cwd=self.pipeline.tmp)
        self.assertEqual(second.returncode, 2, second.stdout + second.stderr)
        self.assertIn(f"runtime dir {self.pipeline.run_dir} is in use by the pipeline of pid "
                      f"{self.pipeline.proc.pid}", second.stderr)
        self.assertEqual(self.client.generate("teh speling", max_new_tokens=4)["status"], "ok")

    def test_a_hub_started_by_hand_there_takes_no_socket_file(self):
        hub = subprocess.run([GATEWAY, *self.same_settings()], capture_output=True, text=True,
                             timeout=60, cwd=self.pipeline.tmp)
        self.assertEqual(hub.returncode, 2, hub.stderr)
        self.assertRegex(hub.stderr, r"gateway\.\w+_endpoint: ipc://" + re.escape(
            self.pipeline.run_dir) + r"/\S+ is bound by another process \(pid \d+")
        for _ in range(3):
            self.assertEqual(self.client.generate("hello", max_new_tokens=4)["status"], "ok")

    def test_an_http_port_in_use_names_its_key(self):
        with socket.socket() as taken:
            # SO_REUSEPORT here: a server that set it too would share the port silently.
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            hub = subprocess.run([GATEWAY, "--set", f"runtime_dir={self.pipeline.tmp}/other",
                                  "--set", f"gateway.http_endpoint=127.0.0.1:{port}",
                                  "--set", f"gateway.client_endpoint=tcp://127.0.0.1:{free_port()}",
                                  "--set", "gateway.metrics_port=0"],
                                 capture_output=True, text=True, timeout=60, cwd=self.pipeline.tmp)
        self.assertEqual(hub.returncode, 2, hub.stderr)
        self.assertIn(f"gateway.http_endpoint: 127.0.0.1:{port}", hub.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""KServe v2 over gRPC on the gateway against a real pipeline (`seqpipe up`, tiny model), with
grpcio's client and stubs generated at test time from services/gateway/proto/grpc_predict_v2.proto
(python3-grpcio, python3-grpc-tools): health and metadata, ModelInfer equals the msgpack path,
bad requests get gRPC error statuses, a call's deadline and its cancellation reach the pipeline, a
stopping gateway answers the calls in flight.
ModelStreamInfer (Triton's streaming RPC): a request's streamed pieces concatenate to ModelInfer's
text, several requests share one stream, errors come as error_message while the stream goes on,
and a cancelled or expired stream cancels its requests in the pipeline.

Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py), PYTHONPATH with clients/python.
"""
import os
import signal
import struct
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import PipelineTestCase, free_port, kserve_stubs, pids, scrape  # noqa: E402

try:
    import grpc
    import grpc_tools  # noqa: F401  (kserve_stubs generates the stubs with it)
except ImportError:  # run on a machine without them: say so rather than fail
    grpc = None

# Tokens (max and min: no eos) for a request that runs long enough (about 0.5 s on the tiny model)
# to be cancelled or to outlive a short deadline.
ENDLESS = 3000
CANCELLED = 'seqpipe_gateway_cancels_total{outcome="cancelled"}'
EXPIRED = 'seqpipe_stage_errors_total{code="deadline_exceeded",stage="gateway"}'


@unittest.skipIf(grpc is None, "python3-grpcio and python3-grpc-tools are not installed")
class GrpcTest(PipelineTestCase):
    PREFIX = "seqpipe-grpc-"

    @classmethod
    def settings(cls):
        cls.port, cls.metrics = free_port(), free_port()
        return [f"gateway.grpc_endpoint=127.0.0.1:{cls.port}",
                f"gateway.metrics_port={cls.metrics}", "batcher.metrics_port=0",
                "gateway.max_text_bytes=64", f"decoder.max_new_tokens={ENDLESS}",
                "batcher.max_queue_delay_us=1000"]

    @classmethod
    def setUpClass(cls):
        cls.generated = tempfile.TemporaryDirectory()
        cls.pb, pb_grpc = kserve_stubs(cls.generated.name)
        super().setUpClass()
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.port}")
        cls.stub = pb_grpc.GRPCInferenceServiceStub(cls.channel)
        cls.model = os.path.basename(cls.pipeline.model)

    @classmethod
    def tearDownClass(cls):
        if hasattr(cls, "channel"):
            cls.channel.close()
        super().tearDownClass()
        cls.generated.cleanup()

    def infer_request(self, texts, raw=False, **params):
        pb = self.pb
        tensor = pb.ModelInferRequest.InferInputTensor(name="text", datatype="BYTES",
                                                       shape=[len(texts)])
        request = pb.ModelInferRequest(model_name=self.model, id="g1", inputs=[tensor])
        data = [t.encode() for t in texts]
        if raw:
            request.raw_input_contents.append(b"".join(struct.pack("<I", len(d)) + d for d in data))
        else:
            tensor.contents.bytes_contents.extend(data)
            request.inputs[0].CopyFrom(tensor)
        for name, value in params.items():
            kind = {bool: "bool_param", int: "int64_param", float: "double_param",
                    str: "string_param"}[type(value)]
            setattr(request.parameters[name], kind, value)
        return request

    def status_of(self, request, timeout=20):
        with self.assertRaises(grpc.RpcError) as caught:
            self.stub.ModelInfer(request, timeout=timeout)
        return caught.exception.code(), caught.exception.details()

    def test_health_and_metadata(self):
        pb = self.pb
        self.assertTrue(self.stub.ServerLive(pb.ServerLiveRequest(), timeout=5).live)
        self.assertTrue(self.stub.ServerReady(pb.ServerReadyRequest(), timeout=5).ready)
        self.assertTrue(
            self.stub.ModelReady(pb.ModelReadyRequest(name=self.model), timeout=5).ready)
        self.assertEqual(self.stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=5).name,
                         "seqpipe")
        metadata = self.stub.ModelMetadata(pb.ModelMetadataRequest(name=self.model), timeout=5)
        self.assertEqual(metadata.name, self.model)
        self.assertEqual([(t.name, t.datatype) for t in metadata.inputs], [("text", "BYTES")])
        self.assertEqual([t.name for t in metadata.outputs], ["text", "scores"])
        with self.assertRaises(grpc.RpcError) as caught:
            self.stub.ModelMetadata(pb.ModelMetadataRequest(name="nope"), timeout=5)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn(self.model, caught.exception.details())

    def test_infer_equals_the_msgpack_path(self):
        texts = ["teh speling", "hello"]
        expected = self.client.generate(texts, max_new_tokens=10, return_scores=True)
        for raw in (False, True):
            response = self.stub.ModelInfer(
                self.infer_request(texts, raw=raw, max_new_tokens=10, return_scores=True),
                timeout=20)
            self.assertEqual(response.model_name, self.model)
            self.assertEqual(response.id, "g1")
            outputs = {o.name: o for o in response.outputs}
            self.assertEqual([t.decode() for t in outputs["text"].contents.bytes_contents],
                             expected["texts"])
            self.assertEqual(list(outputs["text"].shape), [2])
            self.assertEqual(outputs["scores"].datatype, "FP32")
            for got, want in zip(outputs["scores"].contents.fp32_contents, expected["scores"]):
                self.assertAlmostEqual(got, want, places=4)
            self.assertGreater(response.parameters["timings_us.total"].int64_param, 0)

    def test_bad_requests_get_error_statuses(self):
        code = grpc.StatusCode
        bad_type = self.infer_request(["hello"])
        bad_type.inputs[0].datatype = "FP32"
        cases = [
            (bad_type, code.INVALID_ARGUMENT, "datatype"),
            (self.infer_request([""]), code.INVALID_ARGUMENT, "invalid_argument: "),
            (self.infer_request(["x" * 100]), code.INVALID_ARGUMENT, "too_long: "),
            (self.infer_request(["hello"], num_beam=2), code.INVALID_ARGUMENT, "params.num_beam"),
            (self.infer_request(["hello"], max_new_tokens=0), code.INVALID_ARGUMENT,
             "max_new_tokens"),
        ]
        unknown = self.infer_request(["hello"])
        unknown.model_name = "nope"
        cases.append((unknown, code.NOT_FOUND, "unknown model 'nope'"))
        for request, want, text in cases:
            got, details = self.status_of(request)
            self.assertEqual(got, want, details)
            self.assertIn(text, details)
        self.assertEqual(len(self.stub.ModelInfer(self.infer_request(["hello"]), timeout=20)
                             .outputs[0].contents.bytes_contents), 1)  # still serving

    def long_request(self, timeout_ms):
        return self.infer_request(["hello"], max_new_tokens=ENDLESS, min_new_tokens=ENDLESS,
                                  timeout_ms=timeout_ms)

    def ended(self):
        """Requests the gateway gave up by their deadline or by a cancel."""
        return scrape(self.metrics, EXPIRED) + scrape(self.metrics, CANCELLED)

    def wait_for_more(self, count, before):
        deadline = time.monotonic() + 10
        while count() <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        return count()

    def test_deadline_ends_the_request(self):
        # The call's deadline is the request's: the gateway gives it up at that deadline (or on
        # the call's cancellation at the same moment), not at the 30 s timeout_ms it names.
        before = self.ended()
        started = time.monotonic()
        got, _ = self.status_of(self.long_request(30000), timeout=0.2)
        self.assertEqual(got, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - started, 5)
        self.assertGreater(self.wait_for_more(self.ended, before), before)

    def test_cancelled_call_cancels_the_request(self):
        cancelled = lambda: scrape(self.metrics, CANCELLED)  # noqa: E731
        before = cancelled()
        call = self.stub.ModelInfer.future(self.long_request(30000), timeout=30)
        time.sleep(0.05)
        call.cancel()
        self.assertEqual(call.code(), grpc.StatusCode.CANCELLED)
        self.assertGreater(self.wait_for_more(cancelled, before), before)

    def test_a_stopping_gateway_answers_its_calls_unavailable(self):
        # The gateway finishes the gRPC calls on its own thread: stopped with one in flight, it
        # answers it before it exits rather than leave it to the call's 30 s deadline. `seqpipe up`
        # then restarts it on the same port.
        call = self.stub.ModelInfer.future(self.long_request(30000), timeout=30)
        time.sleep(0.2)  # the request is in the pipeline
        (gateway,) = pids(self.pipeline.run_dir, "seqpipe-gateway")
        started = time.monotonic()
        os.kill(gateway, signal.SIGTERM)
        self.assertEqual(call.code(), grpc.StatusCode.UNAVAILABLE, call.details())
        self.assertIn("the gateway is stopping", call.details())
        self.assertLess(time.monotonic() - started, 5)
        self.pipeline.wait_until(
            lambda: self.stub.ModelInfer(self.infer_request(["hello"]), timeout=2).outputs,
            lambda: None, timeout=30)

    def test_a_shorter_timeout_ms_than_the_deadline_stands(self):
        got, details = self.status_of(self.long_request(50), timeout=20)
        self.assertEqual(got, grpc.StatusCode.DEADLINE_EXCEEDED, details)
        self.assertIn("deadline_exceeded: ", details)

    def stream_texts(self, requests, timeout=60):
        """Each request id's responses on one ModelStreamInfer call (the client closes its side
        after the last request): {id: [(error_message, text, final), ...]}."""
        got = {}
        for response in self.stub.ModelStreamInfer(iter(requests), timeout=timeout):
            r = response.infer_response
            texts = [t.decode() for o in r.outputs if o.name == "text"
                     for t in o.contents.bytes_contents]
            got.setdefault(r.id, []).append((response.error_message, texts,
                                             r.parameters["triton_final_response"].bool_param))
        return got

    def test_stream_pieces_concatenate_to_model_infer_text(self):
        long = dict(max_new_tokens=ENDLESS, min_new_tokens=ENDLESS, timeout_ms=30000)
        one = self.infer_request(["teh speling is bad"], **long)
        one.id = "one"
        expected = self.stub.ModelInfer(one, timeout=60).outputs[0].contents.bytes_contents[0]
        two = self.infer_request(["teh speling", "hello"], max_new_tokens=10)
        two.id = "two"
        expected_two = [t.decode() for t in
                        self.stub.ModelInfer(two, timeout=20).outputs[0].contents.bytes_contents]
        got = self.stream_texts([one, two])
        pieces = got["one"]
        self.assertGreater(len(pieces), 2)  # pieces while it was decoded, then the final one
        self.assertTrue(all(error == "" and len(t) == 1 for error, t, _ in pieces))
        self.assertEqual([final for _, _, final in pieces], [False] * (len(pieces) - 1) + [True])
        self.assertEqual("".join(t[0] for _, t, _ in pieces), expected.decode())
        # Several texts are not streamed: one response holds them all.
        self.assertEqual(got["two"], [("", expected_two, True)])

    def test_stream_errors_are_messages_and_the_stream_goes_on(self):
        beams = self.infer_request(["hello"], num_beams=2)
        beams.id = "beams"
        unknown = self.infer_request(["hello"])
        unknown.id, unknown.model_name = "unknown", "nope"
        good = self.infer_request(["hello"], max_new_tokens=5)
        good.id = "good"
        got = self.stream_texts([beams, unknown, good])
        self.assertEqual(len(got["beams"]), 1)
        self.assertTrue(got["beams"][0][0].startswith("invalid_argument: "), got["beams"])
        self.assertIn("stream", got["beams"][0][0])
        self.assertEqual(len(got["unknown"]), 1)
        self.assertIn("unknown model 'nope'", got["unknown"][0][0])
        expected = self.stub.ModelInfer(good, timeout=20).outputs[0].contents.bytes_contents[0]
        self.assertEqual("".join(t[0] for _, t, _ in got["good"]), expected.decode())
        self.assertEqual(got["good"][-1][0], "")

    def test_cancelled_stream_cancels_its_request(self):
        cancelled = lambda: scrape(self.metrics, CANCELLED)  # noqa: E731
        before = cancelled()
        call = self.stub.ModelStreamInfer(iter([self.long_request(30000)]), timeout=30)
        first = next(call)  # the request is being decoded
        self.assertEqual(first.error_message, "")
        call.cancel()
        self.assertEqual(call.code(), grpc.StatusCode.CANCELLED)
        self.assertGreater(self.wait_for_more(cancelled, before), before)
        self.assertEqual(len(self.stub.ModelInfer(self.infer_request(["hello"]), timeout=20)
                             .outputs[0].contents.bytes_contents), 1)  # still serving

    def test_stream_deadline_ends_its_request(self):
        before = self.ended()
        started = time.monotonic()
        with self.assertRaises(grpc.RpcError) as caught:
            for _ in self.stub.ModelStreamInfer(iter([self.long_request(30000)]), timeout=0.3):
                pass
        self.assertEqual(caught.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - started, 5)
        self.assertGreater(self.wait_for_more(self.ended, before), before)


if __name__ == "__main__":
    unittest.main()

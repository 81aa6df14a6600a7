// pipeline_overhead's KServe v2 gRPC client, in a process of its own: the bench runs the engine
// in-process, and SentencePiece's bundled protobuf cannot share a process with gRPC's
// (services/gateway/CMakeLists.txt). For each line read on stdin it makes one ModelInfer call
// and writes "<ms>\t<text>" (or "error\t<status>") on stdout.
//
//   kserve_grpc_timer PORT MODEL TEXT MAX_NEW_TOKENS
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "grpc_predict_v2.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: kserve_grpc_timer PORT MODEL TEXT MAX_NEW_TOKENS\n");
    return 2;
  }
  const auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(std::string("127.0.0.1:") + argv[1], grpc::InsecureChannelCredentials()));
  inference::ModelInferRequest request;
  request.set_model_name(argv[2]);
  auto* input = request.add_inputs();
  input->set_name("text");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents(argv[3]);
  (*request.mutable_parameters())["max_new_tokens"].set_int64_param(std::stoll(argv[4]));
  std::string line;
  while (std::getline(std::cin, line)) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    inference::ModelInferResponse response;
    const auto start = std::chrono::steady_clock::now();
    const grpc::Status status = stub->ModelInfer(&context, request, &response);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!status.ok() || response.outputs_size() == 0 ||
        response.outputs(0).contents().bytes_contents_size() != 1) {
      std::printf("error\t%s\n", status.error_message().c_str());
    } else {
      std::printf("%.6f\t%s\n", ms, response.outputs(0).contents().bytes_contents(0).c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

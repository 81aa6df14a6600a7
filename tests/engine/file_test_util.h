#pragma once
// Helpers for the tests that write and break files: a scratch directory removed at scope exit,
// whole-file read/write, and the message of an expected EngineError (so a test can assert
// which file, tensor or key it names).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>

#include "seqpipe/engine/error.h"

namespace seqpipe::engine::test {

// A fresh directory under the system temp dir; removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "seqpipe-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The message of the EngineError `f` throws; a test failure (and "") when it throws none.
template <typename F>
std::string engine_error_of(F&& f) {
  try {
    f();
  } catch (const EngineError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an EngineError, none was thrown";
  return "";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error(path + ": cannot write");
}

}  // namespace seqpipe::engine::test

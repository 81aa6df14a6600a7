#pragma once
// Helpers the tests of the common libraries share: a temporary directory and an argv.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace seqpipe::test_util {

// A fresh directory under /tmp (short, so ipc paths in it fit a Unix socket), removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/seqpipe-config-test-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = path_ + "/" + name;
    std::ofstream(file) << text;
    return file;
  }

 private:
  std::string path_;
};

// A model version directory's files as a repository scan wants them: config.json and
// spiece.model holding `content` (letters), model.safetensors a whole file of no tensors with
// `content` in its metadata (the scan reads its header; a file of "x" is a copy in progress).
inline void write_model_files(const std::filesystem::path& dir, const std::string& content = "x") {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << content;
  std::ofstream(dir / "spiece.model") << content;
  const std::string header = R"({"__metadata__":{"content":")" + content + "\"}}";
  std::string length(8, '\0');
  for (size_t i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(dir / "model.safetensors", std::ios::binary) << length << header;
}

// argv for parse_service_args / run_service_main; argv[0] is the program name.
class Argv {
 public:
  Argv(std::initializer_list<std::string> args) : strings_(args) {
    strings_.insert(strings_.begin(), "seqpipe-test");
    for (std::string& s : strings_) pointers_.push_back(s.data());
    pointers_.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(strings_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

}  // namespace seqpipe::test_util

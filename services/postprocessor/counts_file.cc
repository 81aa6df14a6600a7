#include "postprocessor/counts_file.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace seqpipe::postprocessor {

std::vector<std::vector<std::string>> read_counts(const std::string& path, size_t fields,
                                                  const char* key) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(std::string(key) + ": cannot read '" + path + "'");
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> row;
    std::stringstream parts(line);
    for (std::string part; std::getline(parts, part, '\t');) row.push_back(part);
    const bool count = row.size() == fields && !row.back().empty() &&
                       std::all_of(row.back().begin(), row.back().end(),
                                   [](unsigned char c) { return c >= '0' && c <= '9'; });
    if (!count)
      throw std::runtime_error(std::string(key) + ": bad line in '" + path + "': " + line);
    rows.push_back(std::move(row));
  }
  if (rows.empty()) throw std::runtime_error(std::string(key) + ": '" + path + "' holds no entry");
  return rows;
}

}  // namespace seqpipe::postprocessor

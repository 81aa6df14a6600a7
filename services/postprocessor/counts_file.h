#pragma once
// The counts files shipped next to a model (tools/train_speller writes them): tab-separated lines,
// the last field a count.
#include <string>
#include <vector>

namespace seqpipe::postprocessor {

// The lines of the counts file at `path`, split at tabs, comments ('#') and blank lines left out;
// each line has `fields` fields, the last a count. Throws std::runtime_error, naming `key` (the
// config key) and the file, when it cannot be read, holds no entry or has a bad line.
std::vector<std::vector<std::string>> read_counts(const std::string& path, size_t fields,
                                                  const char* key);

}  // namespace seqpipe::postprocessor

#pragma once
// `seqpipe-bench sweep --write-config FILE`: the best configuration as a config file that
// `seqpipe up --config FILE` serves as the sweep measured it.
#include <string>
#include <vector>

namespace seqpipe::bench {

// The text of a config file: `base_yaml` (the sweep's --config file; empty: none) with every
// "section.key=value" of `assignments` set in it (a value as `--set` takes it: a YAML scalar or
// flow sequence), after `header` (comment lines, each written with "# "). Only the keys the base
// file or the assignments name are written, so the model directory's own seqpipe.yaml still
// applies to the rest. Throws std::runtime_error for an assignment without '=' or a base file
// that is not a YAML map; what the keys mean is checked by the loader that reads the file.
std::string config_file_text(const std::string& base_yaml,
                             const std::vector<std::string>& assignments,
                             const std::vector<std::string>& header);

}  // namespace seqpipe::bench

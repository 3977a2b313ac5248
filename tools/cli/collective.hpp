#pragma once
// `scaleout collective`: one collective on a cluster's topology over a range of sizes, printed as
// nccl-tests prints it (size, time, algbw, busbw), and `scaleout validate network`: published
// nccl-tests results beside the simulator's.
#include <iosfwd>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace scaleout {

struct CollectiveOptions {
  std::string cluster;
  std::string op = "all_reduce";
  std::string ranks;            // "0,1,2,3", "0-7", "0-63:8"; empty: every GPU
  std::string algo = "auto";
  std::string proto = "auto";
  std::string sizes = "8B:8GiB";
  double factor = 2;
  std::string format = "text";
  std::string profile = "auto";  // link figures: "auto" (the GPU's shipped profile), "datasheet", or a file
  bool list = false;    // print the shipped clusters instead
  bool fields = false;  // print the keys a cluster file takes instead
};

// Parses "8B:8GiB" (min:max, times `factor`), "1MiB,4MiB", or one size; InputError otherwise.
std::vector<double> parse_sizes(const std::string& text, double factor);
// Parses "0,1,2,3", "0-7", "0-63:8" (a range with a stride), or a mix separated by commas.
std::vector<int> parse_ranks(const std::string& text);

void collective_command(const CollectiveOptions& o, std::ostream& os);
// Prints the table of published rows against ours; returns the number of rows off target.
int validate_network(const std::string& file, std::ostream& os);

void register_collective_command(CLI::App& app);

}  // namespace scaleout

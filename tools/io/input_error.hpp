#pragma once
// Bad user input: one error type naming the file and the JSON path, mapped by main to exit code 2.
#include <stdexcept>
#include <string>

namespace scaleout {

class InputError : public std::runtime_error {
 public:
  InputError(const std::string& file, const std::string& path, const std::string& what)
      : std::runtime_error(file + ": " + (path.empty() ? "/" : path) + ": " + what) {}
  explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace scaleout

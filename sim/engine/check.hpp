#pragma once
// Always-on invariant checks: a broken invariant is a bug in scaleout (exit code 1), never bad input.
#include <stdexcept>
#include <string>

namespace scaleout {

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void fail_check(const char* expr, const char* file, int line, const std::string& what);

}  // namespace scaleout

#define SCALEOUT_CHECK(cond, what)                                         \
  do {                                                                     \
    if (!(cond)) ::scaleout::fail_check(#cond, __FILE__, __LINE__, (what)); \
  } while (0)

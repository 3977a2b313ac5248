#include "tools/cli/huge_pages.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__linux__) && defined(__GLIBC__)
#include <climits>
#include <cstdint>
#include <cstdio>
#include <unistd.h>
#endif

namespace scaleout {
namespace {

// A step's task arrays are tens to hundreds of MB, touched once: in a fresh process most of a
// simulation's time went to page faults on them (18k faults, 60 % of a 64-GPU pipeline run
// through the CLI on a VM). glibc backs its large blocks with transparent huge pages when the
// tunable glibc.malloc.hugetlb=1 is set, which is read at start-up only: the process starts again
// once with it (0.27 -> 0.10 s for that run). The same start keeps freed blocks of up to 32 MiB
// in the heap and the heap's top up to 1 GiB (mmap and trim thresholds): a step simulates a few
// windows one after another, and with the defaults every window's arrays came fresh from the
// system and were faulted and zeroed again (the 64-GPU interleaved step 0.07-0.09 -> 0.05 s,
// GPT-3 175B on 1,024 GPUs 0.14 -> 0.10 s through the CLI; 10-20 MB more resident). The heap
// also grows 64 MiB at a time (top_pad; address space, not memory, until touched): grown by the
// default 128 KiB, huge pages rarely covered it and the break moved thousands of times (a
// Llama-3-70B plan on 64 GPUs 42 -> 35 ms, best of 7; resident memory the same). Blocks over
// 32 MiB (the most mmap_threshold takes) were still mapped afresh and unmapped on free, so a
// windowed step's later windows faulted and zeroed their task arrays again: mmap_max=0 serves
// them from the heap too (a slow-NIC Mixtral plan of six rounds and windows: 2,493 -> 458 page
// faults; perf had put a third of its cycles in the kernel zeroing pages).
// SCALEOUT_NO_HUGEPAGES=1 turns it all off; processes that MPI launched are left alone.
#if defined(__linux__) && defined(__GLIBC__)
// Whether /proc/self/exe is the file this code runs from (not valgrind's tool, not the dynamic
// loader started by hand): only then does executing it again run this program.
bool exe_is_this_program() {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return false;
  exe[n] = 0;
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return false;
  const auto here = reinterpret_cast<std::uintptr_t>(&exe_is_this_program);
  char line[PATH_MAX + 256];
  bool same = false;
  while (std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) != 2 || here < lo || here >= hi) continue;
    const char* path = std::strchr(line, '/');
    if (path) {
      std::string p(path);
      while (!p.empty() && p.back() == '\n') p.pop_back();
      same = p == exe;
    }
    break;
  }
  std::fclose(maps);
  return same;
}
#endif

}  // namespace

void restart_with_huge_pages(char** argv) {
#if defined(__linux__) && defined(__GLIBC__)
  for (const char* v : {"SCALEOUT_NO_HUGEPAGES", "SCALEOUT_RESTARTED", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE",
                        "PMI_RANK", "SLURM_PROCID"})
    if (std::getenv(v)) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "glibc.malloc.hugetlb")) return;
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload && std::strstr(preload, "vgpreload")) return;  // under valgrind, which runs the child natively
  if (!exe_is_this_program()) return;
  const std::string old = tunables ? tunables : "";
  const std::string value = (old.empty() ? std::string() : old + ":") +
                            "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824:"
                            "glibc.malloc.top_pad=67108864:glibc.malloc.mmap_max=0";
  // The marker ends any loop: a second start never tries again, whatever became of the tunable.
  if (setenv("SCALEOUT_RESTARTED", "1", 1) != 0 || setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Could not start again: carry on as we are, with the environment as it was.
  unsetenv("SCALEOUT_RESTARTED");
  if (tunables) setenv("GLIBC_TUNABLES", old.c_str(), 1);
  else unsetenv("GLIBC_TUNABLES");
#else
  (void)argv;
#endif
}
}  // namespace scaleout

#pragma once
// A step's task arrays are tens to hundreds of MB, touched once: in a fresh process most of a
// simulation's time went to page faults on them. The CLI and the benchmarks start themselves
// again once with glibc's huge pages (see huge_pages.cpp).

namespace scaleout {

// Executes this program again with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 unless that is set or
// not possible (returns then); SCALEOUT_NO_HUGEPAGES=1 turns it off.
void restart_with_huge_pages(char** argv);

}  // namespace scaleout

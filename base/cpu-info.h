// What machine a number was measured on: the CPU's model name, printed next to every benchmark
// figure (the project's machines differ: an Intel Xeon one day, an AMD EPYC the next). Pure
// function of /proc/cpuinfo; safe from any thread.
#pragma once

#include <string>

namespace impress {

// The "model name" line of /proc/cpuinfo (e.g. "AMD EPYC 9R14 96-Core Processor"), or
// "unknown CPU" where it cannot be read.
std::string CpuModelName();

}  // namespace impress

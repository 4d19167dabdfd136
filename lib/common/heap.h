// The heap settings of every long-running nodelet process (the supervisor and each service).
// The processes are I/O-bound and mostly idle, and most of what they hold is small and
// short-lived (decoded messages, CRI answers): what costs memory is not the live data but what
// glibc keeps after a burst. Two measures (docs/bench.md, "Footprint"):
//   - one malloc arena for the whole process, instead of one per thread that allocates (gRPC's
//     and ZeroMQ's threads, the workers): each arena keeps its own free memory;
//   - free memory inside the heap given back to the kernel on a slow period (malloc_trim(0),
//     which also releases whole free pages in the middle of the heap, not only at its top).
#pragma once

#include <chrono>

namespace nodelet {

// How often a process's loop hands free heap back (ReleaseFreeHeap).
inline constexpr std::chrono::seconds kHeapReleasePeriod{30};

// Makes every thread share the main arena. Call it first in main, before any thread starts:
// arenas made before it stay.
void UseOneMallocArena();

// Gives the heap's free pages back to the kernel. Cheap on a small heap (well under a
// millisecond here); called from the loop's timer every kHeapReleasePeriod.
void ReleaseFreeHeap();

}  // namespace nodelet

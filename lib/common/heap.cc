#include "lib/common/heap.h"

#include <malloc.h>

namespace nodelet {

void UseOneMallocArena() { mallopt(M_ARENA_MAX, 1); }

void ReleaseFreeHeap() { malloc_trim(0); }

}  // namespace nodelet

// The index of this workgroup in a 1-D count of them that the host split over x and y
// (vk::Groups::linear): past the device's x limit the grid is kGridWidth groups wide. A fixed width
// rather than gl_NumWorkGroups.x, because a kernel that reads gl_NumWorkGroups costs each of its
// dispatches about 0.28 us more on NVIDIA's driver (measured on the H200: kiln's elementwise kernel
// in a chain of dependent dispatches, 2.11 -> 1.83 us each; bench/gpu/barrier_bench.cpp, kernel bit 8).
#ifndef KILN_GRID_GLSL
#define KILN_GRID_GLSL

const uint kGridWidth = 32768u;  // vk::Groups::kGridWidth

uint kiln_group_id() { return gl_WorkGroupID.y * kGridWidth + gl_WorkGroupID.x; }

#endif

// Builds a small graph with the installed kiln and checks its value.
#include <kiln/kiln.h>

#include <cmath>
#include <iostream>

int main() {
  kiln::Array x({1.0f, 2.0f, 3.0f});
  kiln::Array y = x * x + 1.0f;
  std::cout << y << "\n";
  const float total = kiln::sum(y).item<float>();
  if (std::abs(total - 17.0f) > 1e-5f) {
    std::cerr << "expected sum 17, got " << total << "\n";
    return 1;
  }
  return 0;
}

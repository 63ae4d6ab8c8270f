// A LibTorch program that knows nothing of ampscope: a float16 matmul that overflows.
// `ampscope run -- build/bin/ampscope-example-plain` profiles it through LD_PRELOAD.
#include <torch/torch.h>

#include <iostream>

int main() {
  auto a = torch::full({4, 4}, 200.0f), b = torch::full({4, 4}, 200.0f);
  auto y = torch::mm(a.to(torch::kHalf), b.to(torch::kHalf));  // 160000 > 65504: inf
  std::cout << "max " << y.max().item<float>() << "\n";
  return 0;
}

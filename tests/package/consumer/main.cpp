// Trains a Linear for a few steps under bfloat16 autocast with an ampscope Session; the report
// lands in argv[1].
#include <ampscope/hooks/autocast_guard.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>
#include <torch/torch.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  torch::manual_seed(0);
  torch::nn::Linear fc(16, 4);
  torch::optim::SGD opt(fc->parameters(), 0.01);
  ampscope::SessionOptions o;
  o.out_dir = argv[1];
  o.autocast_dtype = "bfloat16";
  ampscope::Session session(o);
  session.attach(*fc);
  session.start();
  for (int step = 0; step < 3; ++step) {
    torch::Tensor loss;
    {
      ampscope::AutocastGuard autocast(torch::kCPU, torch::kBFloat16);
      loss = ampscope::forward(fc, torch::randn({8, 16})).to(torch::kFloat).pow(2).mean();
    }
    opt.zero_grad();
    loss.backward();
    session.optimizer_step(opt);
  }
  session.stop();
  return 0;
}

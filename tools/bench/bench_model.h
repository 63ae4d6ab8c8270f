// The benchmark's training workload: a pre-norm transformer language model (LayerScope in every
// module, built-in modules called through ampscope::forward) trained under autocast with SGD.
// Header-only: included by overhead_bench.cpp alone.
#pragma once

#include <ampscope/hooks/autocast_guard.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>

#include <torch/torch.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampscope::bench {

namespace nn = torch::nn;

/// Model and batch shape. The default is the workload (4 blocks, d=256, seq 64, batch 8).
struct ModelShape {
  int vocab = 512, model = 256, heads = 4, ff = 1024, seq = 64, batch = 8, blocks = 4;
  /// A small model for long runs (memory over 2,000 steps).
  static ModelShape small() { return {128, 64, 4, 256, 32, 8, 2}; }
};

struct BlockImpl : nn::Module {
  nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  nn::Linear qkv{nullptr}, proj{nullptr}, wi{nullptr}, wo{nullptr};
  int heads;
  explicit BlockImpl(const ModelShape& s) : heads(s.heads) {
    ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({s.model})));
    qkv = register_module("qkv", nn::Linear(s.model, 3 * s.model));
    proj = register_module("proj", nn::Linear(s.model, s.model));
    ln2 = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({s.model})));
    wi = register_module("wi", nn::Linear(s.model, s.ff));
    wo = register_module("wo", nn::Linear(s.ff, s.model));
  }
  torch::Tensor attention(const torch::Tensor& x) {
    auto b = x.size(0), t = x.size(1), d = x.size(2);
    auto parts = ampscope::forward(qkv, x).chunk(3, -1);
    auto split = [&](const torch::Tensor& p) { return p.view({b, t, heads, d / heads}).transpose(1, 2); };
    auto y = at::scaled_dot_product_attention(split(parts[0]), split(parts[1]), split(parts[2]), {},
                                              0.0, /*is_causal=*/true);
    return ampscope::forward(proj, y.transpose(1, 2).reshape({b, t, d}));
  }
  torch::Tensor forward(torch::Tensor x) {
    LayerScope scope(*this);
    x = x + attention(ampscope::forward(ln1, x));
    return x + ampscope::forward(wo, torch::gelu(ampscope::forward(wi, ampscope::forward(ln2, x))));
  }
};
TORCH_MODULE(Block);

struct LanguageModelImpl : nn::Module {
  nn::Embedding tok{nullptr}, pos{nullptr};
  std::vector<Block> blocks;
  nn::LayerNorm ln_f{nullptr};
  nn::Linear head{nullptr};
  explicit LanguageModelImpl(const ModelShape& s) {
    tok = register_module("tok", nn::Embedding(s.vocab, s.model));
    pos = register_module("pos", nn::Embedding(s.seq, s.model));
    for (int i = 0; i < s.blocks; ++i) {
      blocks.push_back(register_module("block" + std::to_string(i), Block(s)));
    }
    ln_f = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({s.model})));
    head = register_module("head", nn::Linear(s.model, s.vocab));
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    LayerScope scope(*this);
    auto x = ampscope::forward(tok, idx) +
             ampscope::forward(pos, torch::arange(idx.size(1), idx.options()));
    for (auto& b : blocks) x = ampscope::forward(b, x);  // a call a watched step can replay
    return ampscope::forward(head, ampscope::forward(ln_f, x));
  }
};
TORCH_MODULE(LanguageModel);

/// Trains the model one step at a time on a fixed random batch.
class Trainer {
 public:
  Trainer(const ModelShape& shape, const std::string& device, const std::string& dtype)
      : shape_(shape), device_(device == "cuda" ? torch::kCUDA : torch::kCPU) {
    torch::manual_seed(0);
    if (dtype == "bfloat16") dtype_ = torch::kBFloat16;
    else if (dtype == "float16") dtype_ = torch::kHalf;
    else if (dtype == "float32") autocast_ = false;
    else throw std::runtime_error("unknown --dtype " + dtype);
    model_ = LanguageModel(shape);
    model_->to(device_);
    opt_ = std::make_unique<torch::optim::SGD>(model_->parameters(), torch::optim::SGDOptions(1e-3));
    auto seq = torch::randint(shape.vocab, {shape.batch, shape.seq + 1}, torch::kLong).to(device_);
    x_ = seq.slice(1, 0, shape.seq);
    y_ = seq.slice(1, 1, shape.seq + 1);
  }

  /// Forward under autocast, backward, optimizer step (marked on `session` when given).
  void step(Session* session) {
    torch::Tensor loss;
    {
      AutocastGuard autocast(device_.type(), dtype_, autocast_);
      auto logits = model_->forward(x_);
      loss = torch::cross_entropy_loss(logits.reshape({-1, shape_.vocab}).to(torch::kFloat),
                                       y_.reshape({-1}));
    }
    opt_->zero_grad();
    loss.backward();
    if (session) session->optimizer_step(*opt_);
    else opt_->step();
  }

  /// Waits for queued device work (CUDA); a no-op on CPU.
  void sync() {
    if (device_.is_cuda()) torch::cuda::synchronize();
  }

  LanguageModel& model() { return model_; }

 private:
  ModelShape shape_;
  torch::Device device_;
  c10::ScalarType dtype_ = torch::kBFloat16;
  bool autocast_ = true;
  LanguageModel model_{nullptr};
  std::unique_ptr<torch::optim::SGD> opt_;
  torch::Tensor x_, y_;
};

}  // namespace ampscope::bench

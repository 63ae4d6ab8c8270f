#include "demo.h"

#include <ampscope/hooks/autocast_guard.h>
#include <ampscope/hooks/grad_scaler.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>

#include <ATen/record_function.h>
#include <fmt/core.h>
#include <torch/torch.h>

#include <atomic>
#include <csignal>
#include <stdexcept>

namespace ampscope::demo {
namespace {

namespace nn = torch::nn;

constexpr int kVocab = 128;
constexpr int kModel = 64;
constexpr int kHeads = 4;
constexpr int kFF = 256;
constexpr int kSeq = 32;
constexpr int kBatch = 8;
constexpr int kBlocks = 2;

struct FeedForwardImpl : nn::Module {
  nn::Linear wi{nullptr}, wo{nullptr};
  FeedForwardImpl() {
    wi = register_module("wi", nn::Linear(kModel, kFF));
    wo = register_module("wo", nn::Linear(kFF, kModel));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    LayerScope scope(*this);
    return ampscope::forward(wo, torch::gelu(ampscope::forward(wi, x)));
  }
};
TORCH_MODULE(FeedForward);

struct AttentionImpl : nn::Module {
  nn::Linear qkv{nullptr}, proj{nullptr};
  AttentionImpl() {
    qkv = register_module("qkv", nn::Linear(kModel, 3 * kModel));
    proj = register_module("proj", nn::Linear(kModel, kModel));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    LayerScope scope(*this);
    auto b = x.size(0), t = x.size(1);
    auto parts = ampscope::forward(qkv, x).chunk(3, -1);
    auto heads = [&](const torch::Tensor& p) {
      return p.view({b, t, kHeads, kModel / kHeads}).transpose(1, 2);
    };
    auto y = at::scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                              {}, 0.0, /*is_causal=*/true);
    return ampscope::forward(proj, y.transpose(1, 2).reshape({b, t, kModel}));
  }
};
TORCH_MODULE(Attention);

struct BlockImpl : nn::Module {
  nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  Attention attn{nullptr};
  FeedForward ffn{nullptr};
  BlockImpl() {
    ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({kModel})));
    attn = register_module("attn", Attention());
    ln2 = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({kModel})));
    ffn = register_module("ffn", FeedForward());
  }
  torch::Tensor forward(torch::Tensor x) {
    LayerScope scope(*this);
    x = x + attn(ampscope::forward(ln1, x));
    return x + ffn(ampscope::forward(ln2, x));
  }
};
TORCH_MODULE(Block);

struct LanguageModelImpl : nn::Module {
  nn::Embedding tok{nullptr}, pos{nullptr};
  nn::ModuleList blocks;
  std::vector<Block> block_list;
  nn::LayerNorm ln_f{nullptr};
  nn::Linear head{nullptr};
  LanguageModelImpl() {
    tok = register_module("tok", nn::Embedding(kVocab, kModel));
    pos = register_module("pos", nn::Embedding(kSeq, kModel));
    blocks = register_module("blocks", nn::ModuleList());
    for (int i = 0; i < kBlocks; ++i) {
      block_list.push_back(Block());
      blocks->push_back(block_list.back());
    }
    ln_f = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({kModel})));
    head = register_module("head", nn::Linear(kModel, kVocab));
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    LayerScope scope(*this);
    auto positions = torch::arange(idx.size(1), idx.options());
    auto x = ampscope::forward(tok, idx) + ampscope::forward(pos, positions);
    for (auto& block : block_list) x = block(x);
    return ampscope::forward(head, ampscope::forward(ln_f, x));
  }
};
TORCH_MODULE(LanguageModel);

/// Synthetic next-token data with a learnable rule: t[i+1] = (5 * t[i] + 3) mod vocab.
std::pair<torch::Tensor, torch::Tensor> make_batch(const torch::Device& device) {
  auto start = torch::randint(kVocab, {kBatch, 1}, torch::kLong);
  std::vector<torch::Tensor> cols{start};
  for (int i = 0; i < kSeq; ++i) cols.push_back((cols.back() * 5 + 3) % kVocab);
  auto seq = torch::cat(cols, 1).to(device);
  return {seq.slice(1, 0, kSeq), seq.slice(1, 1, kSeq + 1)};
}

std::atomic<int> g_signal{0};
/// Handled once: the first SIGINT/SIGTERM ends training; later ones (e.g. while the report is
/// written) change nothing.
void on_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
}

/// Restores the previous SIGINT/SIGTERM handlers on scope exit.
struct SignalScope {
  using Handler = void (*)(int);
  Handler prev_int, prev_term;
  SignalScope() {
    g_signal.store(0);
    prev_int = std::signal(SIGINT, on_signal);
    prev_term = std::signal(SIGTERM, on_signal);
  }
  ~SignalScope() {
    std::signal(SIGINT, prev_int);
    std::signal(SIGTERM, prev_term);
  }
};

/// Scales wo so that its outputs reach float16's max near `overflow_step`, growing 2x a step:
/// a stand-in for the slow drift that drove T5's wo past 65504 in real training.
double plant_scale(LanguageModel& model, const torch::Device& device, int overflow_step) {
  torch::NoGradGuard no_grad;
  auto [x, y] = make_batch(device);
  auto& ffn = model->block_list[1]->ffn;
  auto h = model->block_list[1]->ln2(model->tok(x));
  double absmax = ffn->forward(h).abs().max().item<double>();
  return 65504.0 * 1.5 / std::ldexp(1.0, overflow_step) / std::max(absmax, 1e-6);
}

void grow_wo(LanguageModel& model, double factor) {
  at::DisableRecordFunctionGuard unobserved;  // the planted drift is not part of the model
  torch::NoGradGuard no_grad;
  auto& wo = model->block_list[1]->ffn->wo;
  wo->weight.mul_(factor);
  wo->bias.mul_(factor);
}

/// Stand-in for a GradScaler's found_inf check, kept out of the report.
bool grads_finite(LanguageModel& model) {
  at::DisableRecordFunctionGuard unobserved;
  torch::NoGradGuard no_grad;
  for (const auto& p : model->parameters()) {
    if (p.grad().defined() && !torch::isfinite(p.grad()).all().item<bool>()) return false;
  }
  return true;
}

/// One iteration after the forward: backward and optimizer step, with the scaler when it is
/// enabled (it skips the step on inf/NaN gradients), else skipping on a non-finite loss or
/// gradient by hand. Ends the step on the session either way. Returns whether the step ran.
bool backward_and_step(Session& session, GradScaler& scaler, torch::optim::Optimizer& optimizer,
                       LanguageModel& model, const torch::Tensor& loss) {
  optimizer.zero_grad();
  if (scaler.is_enabled()) {
    scaler.scale(loss).backward();
    return session.optimizer_step(scaler, optimizer);
  }
  loss.backward();
  bool ok = std::isfinite(loss.item<float>()) && grads_finite(model);
  if (ok) {
    session.optimizer_step(optimizer);
  } else {
    session.step();
  }
  return ok;
}

c10::ScalarType parse_dtype(const std::string& d) {
  if (d == "float16") return torch::kHalf;
  if (d == "bfloat16") return torch::kBFloat16;
  throw std::invalid_argument("--dtype must be float16 or bfloat16, got '" + d + "'");
}

}  // namespace

int planted_overflow_step(int steps) { return std::max(1, steps / 2); }

DemoResult run_demo(const DemoOptions& options) {
  torch::Device device(options.device == "cuda" ? torch::kCUDA : torch::kCPU);
  if (device.is_cuda() && !torch::cuda::is_available()) {
    throw std::invalid_argument("--device cuda: no CUDA device is available here");
  }
  c10::ScalarType dtype = parse_dtype(options.dtype);
  // From here on Ctrl-C ends the run with its report (no steps when it came during set-up).
  SignalScope signals;
  torch::manual_seed(options.seed);
  LanguageModel model;
  model->to(device);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  int overflow_step = planted_overflow_step(options.steps);
  grow_wo(model, plant_scale(model, device, overflow_step));

  SessionOptions so;
  so.out_dir = options.out_dir;
  so.every = options.every;
  so.device = options.device;
  so.autocast_dtype = options.dtype;
  so.shadow = options.shadow;
  so.stop_on_nonfinite = options.stop_on_nonfinite;
  so.layers = options.layers;
  so.ops = options.ops;
  so.input_stats = options.input_stats;
  so.command = fmt::format("ampscope demo --device {} --dtype {} --steps {}{}{}{}{}",
                           options.device, options.dtype, options.steps,
                           options.scaler ? " --scaler" : "",
                           options.map_path.empty() ? "" : " --map " + options.map_path,
                           options.shadow ? " --shadow" : "",
                           options.stop_on_nonfinite ? " --stop-on-nonfinite" : "");
  Session session(so);
  session.attach(*model);
  if (!options.map_path.empty()) session.apply_precision_map(options.map_path);
  DemoResult result;
  result.scaler = options.scaler || (device.is_cuda() && dtype == torch::kHalf);
  GradScalerOptions scaler_options;
  scaler_options.enabled = result.scaler;
  GradScaler scaler(scaler_options);
  session.start();
  for (int step = 0; step < options.steps && g_signal.load() == 0; ++step) {
    auto [x, y] = make_batch(device);
    torch::Tensor loss;
    {
      AutocastGuard autocast(device.type(), dtype);
      auto logits = model->forward(x);
      LayerScope scope("loss");
      loss = torch::nn::functional::cross_entropy(logits.view({-1, kVocab}), y.reshape({-1}));
    }
    if (session.stop_requested()) {
      result.stopped_on_nonfinite = true;
      break;
    }
    bool ok = backward_and_step(session, scaler, optimizer, model, loss);
    if (!ok) ++result.steps_skipped;
    grow_wo(model, 2.0);
    ++result.steps_run;
    if (!options.quiet) {
      at::DisableRecordFunctionGuard unobserved;  // progress output is not the model's work
      std::string scale = result.scaler ? fmt::format("  scale {:g}", scaler.get_scale()) : "";
      fmt::print("step {:>3}/{}  loss {:>9.4f}{}{}\n", step + 1, options.steps,
                 loss.item<float>(), scale, ok ? "" : "  (non-finite: optimizer step skipped)");
      std::fflush(stdout);
    }
  }
  result.interrupted = g_signal.load() != 0;
  if (result.interrupted) session.set_stopped("signal");
  session.stop();
  result.signal = g_signal.load();  // also one that arrived while the report was written
  result.report_path = options.out_dir + "/report.json";
  return result;
}

}  // namespace ampscope::demo

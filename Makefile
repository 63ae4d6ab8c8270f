# ampscope — top-level entry points. `make` builds into build/, `make demo` runs the main job,
# `make test` builds and runs every test (C++ and Python). Missing dependencies are installed by
# tools/install-deps.sh on first use.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
PYTHON ?= python3
CUDA_HOME ?= /usr/local/cuda
DEMO_OUT ?= demo-out
DEMO_ARGS ?= --dtype float16 --out $(DEMO_OUT)

export PATH := $(CUDA_HOME)/bin:$(PATH)
export CUDACXX ?= $(CUDA_HOME)/bin/nvcc

.PHONY: all deps configure build test demo bench clean format
all: build

deps:
	@$(PYTHON) -c 'import torch, torchvision, transformers, accelerate, pytest, selenium, wheel' 2>/dev/null && command -v ninja >/dev/null && command -v ccache >/dev/null \
	  && test -f /usr/include/nlohmann/json.hpp && test -f /usr/include/fmt/format.h \
	  && test -f /usr/include/gtest/gtest.h \
	  && command -v chromium >/dev/null && test -x /usr/bin/chromedriver \
	  || ./tools/install-deps.sh

$(BUILD_DIR)/build.ninja: | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DPython3_EXECUTABLE=$$(command -v $(PYTHON)) \
	  -DCMAKE_PREFIX_PATH="$$($(PYTHON) -c 'import torch; print(torch.utils.cmake_prefix_path)')"

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	cmake --build $(BUILD_DIR)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 900

demo: build
	$(BUILD_DIR)/bin/ampscope demo $(DEMO_ARGS)

# Benchmarks (not tests): stats kernel throughput, then training-step overhead, callback cost
# per op and memory over long runs (C++), then the Python loop against its peers
# (PY_BENCH_ARGS=--quick: 3 rounds) and ampscope.tensor_stats from Python. Figures are ratios measured within one run; JSON lands in
# $(BUILD_DIR)/bench-*.json.
bench: build
	$(BUILD_DIR)/bin/ampscope-bench-stats --json $(BUILD_DIR)/bench-stats.json $(STATS_BENCH_ARGS)
	$(BUILD_DIR)/bin/ampscope-bench-overhead --json $(BUILD_DIR)/bench-overhead.json $(OVERHEAD_BENCH_ARGS)
	PYTHONPATH=$(BUILD_DIR)/python $(PYTHON) tools/bench/python_overhead.py --json $(BUILD_DIR)/bench-python.json $(PY_BENCH_ARGS)
	PYTHONPATH=$(BUILD_DIR)/python $(PYTHON) tools/bench/python_stats.py --json $(BUILD_DIR)/bench-python-stats.json

format:
	find profiler hooks reports tools tests -name '*.cpp' -o -name '*.h' -o -name '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)

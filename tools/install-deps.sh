#!/usr/bin/env bash
# Installs everything ampscope needs to build and test on a fresh Debian 12 machine:
# Debian packages (compiler tools, nlohmann/json, fmt, GoogleTest) and the pinned PyPI torch
# wheel, whose bundled LibTorch the C++ code builds and links against. Idempotent: installs only
# what is missing. Set AMPSCOPE_SKIP_APT=1 to skip the apt step (e.g. on a machine without root).
set -euo pipefail

TORCH_VERSION="${AMPSCOPE_TORCH_VERSION:-2.11.0}"
PYTHON="${PYTHON:-python3}"
# chromium + chromium-driver: the HTML report's browser test (headless, tests/python/test_html_browser.py).
APT_PACKAGES=(cmake ninja-build ccache g++ make nlohmann-json3-dev libfmt-dev libgtest-dev libgmock-dev
              chromium chromium-driver)

log() { echo "[install-deps] $*"; }

missing_apt=()
if [ "${AMPSCOPE_SKIP_APT:-0}" != 1 ]; then
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_apt+=("$p")
  done
fi
if [ ${#missing_apt[@]} -gt 0 ]; then
  log "apt: installing ${missing_apt[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing_apt[@]}" >/dev/null
fi

have_torch=$("$PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have_torch" != "$TORCH_VERSION" ]; then
  log "pip: installing torch==$TORCH_VERSION (found: ${have_torch:-none}); this is a large download"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check "torch==$TORCH_VERSION"
fi
# Test-only packages: real models nobody here wrote (transformers, timm, torchvision; no weights
# are downloaded; accelerate is what transformers.Trainer needs); selenium drives
# the Debian chromium for the HTML report's browser test; wheel lets `pip install
# --no-build-isolation .` build (the packaging test).
# module:requirement pairs; torchvision is pinned to the release built for torch 2.11.0.
for pair in numpy:numpy pytest:pytest torchvision:torchvision==0.26.0 transformers:transformers==5.24.0 \
            timm:timm==1.0.31 selenium:selenium==4.51.0 accelerate:accelerate==1.16.0 wheel:wheel; do
  mod=${pair%%:*}; req=${pair#*:}
  "$PYTHON" -c "import $mod" 2>/dev/null || {
    log "pip: installing $req"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check "$req"
  }
done
log "ok: torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"

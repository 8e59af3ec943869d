#!/usr/bin/env bash
# Installs the backend (scripts/install.sh) and runs the demo kernels on the emulator (or on an Apple GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
python examples/demo.py

